"""Small host->device copies of integers through a ring of pinned buffers, never from pageable memory.

CUDA makes a copy from pageable host memory wait for all work already queued on the stream. Work queued ahead
(plain decoding one step ahead, the propose queued before the readback) would then stall the host until the device
caught up, and the device would idle while the host launched what comes next.
"""
from __future__ import annotations

import torch

RING = 64  # buffers in turn: a buffer is reused only after the copy out of it has completed (its event)
CAPACITY = 4096  # int64 values per buffer; larger copies pin a buffer of their own

_buffers: list[torch.Tensor] = []
_events: list[torch.cuda.Event | None] = []
_turn = 0


def to_device(values, device) -> torch.Tensor:
    """values (ints, nested lists of ints) -> an int64 tensor on device, copied asynchronously on CUDA."""
    host = torch.tensor(values, dtype=torch.int64)
    if torch.device(device).type != "cuda":
        return host.to(device)
    if host.numel() > CAPACITY:
        return host.pin_memory().to(device, non_blocking=True)
    return _through_ring(host, lambda buf: buf.to(device, non_blocking=True))


def copy_into(dst: torch.Tensor, values: list[int]) -> None:
    """dst[:len(values)] = values (int64 dst), asynchronously through the ring on CUDA (a graph's static input)."""
    host = torch.tensor(values, dtype=torch.int64)
    if dst.device.type != "cuda" or host.numel() > CAPACITY:
        dst[:host.numel()].copy_(host.pin_memory() if dst.is_cuda else host, non_blocking=dst.is_cuda)
        return
    _through_ring(host, lambda buf: dst[:host.numel()].copy_(buf.view(-1), non_blocking=True))


def _through_ring(host: torch.Tensor, copy):
    """copy(pinned buffer holding host's values) -> its result; the buffer is reused once that copy has completed."""
    global _turn
    if not _buffers:
        with torch.inference_mode(False):  # NOTE: ordinary tensors: written in and out of inference mode
            _buffers.extend(torch.empty(CAPACITY, dtype=torch.int64).pin_memory() for _ in range(RING))
        _events.extend([None] * RING)
    slot, _turn = _turn, (_turn + 1) % RING
    if _events[slot] is not None:
        _events[slot].synchronize()  # the copy that last used this buffer (RING copies ago): long done
    buf = _buffers[slot][:host.numel()].view(host.shape)
    buf.copy_(host)
    out = copy(buf)
    _events[slot] = torch.cuda.Event()
    _events[slot].record()
    return out


def floats_to_device(values: list[float], device) -> torch.Tensor:
    """values (floats) -> a float32 tensor on device, copied as to_device copies (their float64 bits as int64), each
    rounded to float32 as torch.tensor(values, dtype=torch.float32) rounds it."""
    bits = torch.tensor(values, dtype=torch.float64).view(torch.int64).tolist()
    return to_device(bits, device).view(torch.float64).float()
