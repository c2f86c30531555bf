"""CUDA graphs of the sampler's race: its dozen Triton launches (ops/triton_nucleus.py) replayed as one.

A plain sampled step or a verify's device-drawn rows race over rows of the logits a target graph wrote: a static
tensor [tier, V], so the race over all of it can be captured. One graph per form (that tensor and the filter: at
most the graph tiers times the filters in use); the live rows' keys go into the graph's static keys before each
replay (staging.copy_into; the other rows race on key 0 and are dropped) and their tokens are copied out after it,
so a step's tokens stay valid when the next step replays the graph. A row's token does not depend on the rows
beside it (ops/triton_nucleus.py), so it is the eager race's. A form is captured on its CAPTURE_AFTER-th use, at
most MAX_GRAPHS are kept (the least recently used goes) and at most MAX_CAPTURES are ever made (a capture waits for
the device: a workload that keeps changing forms stays eager rather than stalling); all share one memory pool,
which holds nothing between replays but their tokens, as they replay one at a time on one stream.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import NamedTuple

import torch

from sparkdec.env import flag
from sparkdec.sampling import SamplingParams, kernel_sampler_on, keyed_kernel_race
from sparkdec.staging import copy_into

SAMPLER_GRAPHS = flag("SPARKDEC_SAMPLER_GRAPHS", True)
CAPTURE_AFTER = 2  # uses of a form before it is captured (the first runs eagerly, which also compiles its kernels)
MAX_GRAPHS = 32  # forms kept
MAX_CAPTURES = 128  # captures an engine makes in all
MAX_SEEN = 1024  # forms counted before the counts start over


class Form(NamedTuple):
    """What a captured race is specific to: the static logits it reads and the filter."""
    address: int
    shape: tuple
    row_stride: int
    dtype: torch.dtype
    device: torch.device
    temperature: float
    top_k: int
    top_p: float

    @staticmethod
    def of(whole: torch.Tensor, params: SamplingParams) -> Form:
        return Form(whole.data_ptr(), tuple(whole.shape), whole.stride(0), whole.dtype, whole.device,
                    params.temperature, params.top_k, params.top_p)


class Captured(NamedTuple):
    graph: torch.cuda.CUDAGraph
    keys: torch.Tensor  # [tier] int64, the static input
    tokens: torch.Tensor  # [tier] int64, the static output
    arrivals: torch.Tensor  # the counters the graph was captured with, held so they outlive a reallocation


class SamplerGraphs:
    """Captured races, by form. race(rows, params, keys, whole) is kernel_race(rows, params, keys), bit for bit."""

    def __init__(self):
        self.graphs: OrderedDict[Form, Captured] = OrderedDict()
        self.seen: dict[Form, int] = {}
        self.pool = None
        self.captures = 0
        self.broken = False  # a capture failed: every race eager from then on

    def race(self, rows: torch.Tensor, params: SamplingParams, keys: list[int], whole: torch.Tensor):
        """Each row's token [R] int64 (a fresh tensor) given rows [R, V], a view of whole [tier, V], and each row's
        key; None where no graph races them this time (the caller races them eagerly)."""
        lo = row_offset(rows, whole)
        if lo is None or not self.replays(whole):
            return None
        entry = self._graph_for(Form.of(whole, params), whole, params)
        if entry is None:
            return None
        padded = [0] * whole.shape[0]
        padded[lo:lo + len(keys)] = keys
        copy_into(entry.keys, padded)
        entry.graph.replay()
        return entry.tokens[lo:lo + len(keys)].clone()

    @staticmethod
    def replays(whole: torch.Tensor) -> bool:
        """Can a graph race over rows of whole (on, on CUDA, the kernel sampler's race)?"""
        return SAMPLER_GRAPHS and whole.is_cuda and kernel_sampler_on()

    def _graph_for(self, form: Form, whole: torch.Tensor, params: SamplingParams) -> Captured | None:
        """The form's graph, captured now if this is its CAPTURE_AFTER-th use; None if it is not (yet) captured."""
        entry = self.graphs.get(form)
        if entry is not None:
            self.graphs.move_to_end(form)
            return entry
        if self.broken or self.captures >= MAX_CAPTURES:
            return None
        if len(self.seen) >= MAX_SEEN:
            self.seen.clear()
        self.seen[form] = self.seen.get(form, 0) + 1
        if self.seen[form] < CAPTURE_AFTER:
            return None
        del self.seen[form]
        try:
            entry = self._capture(whole, params)
        except RuntimeError as exc:  # (torch.AcceleratorError is one) the race stays eager: same tokens
            warnings.warn(f"sampler graph capture failed ({exc}); sampling eagerly")
            self.broken = True
            return None
        self.captures += 1
        self.graphs[form] = entry
        while len(self.graphs) > MAX_GRAPHS:
            self.graphs.popitem(last=False)
        return entry

    def _capture(self, whole: torch.Tensor, params: SamplingParams) -> Captured:
        """The race over all of whole's rows as a graph, its kernels compiled and its counters sized before."""
        from sparkdec.engine.graphs import capture_one
        from sparkdec.ops.triton_nucleus import arrivals_for

        with torch.inference_mode(False):  # (written by copy_into in and out of inference mode)
            keys = torch.zeros(whole.shape[0], dtype=torch.int64, device=whole.device)
        arrivals = arrivals_for(whole.device, whole.shape[0])
        keyed_kernel_race(whole, params, keys)  # (eagerly once: every kernel of this row count compiled)
        graph, tokens = capture_one(lambda _: keyed_kernel_race(whole, params, keys), 0, self.pool)
        self.pool = graph.pool()
        return Captured(graph, keys, tokens, arrivals)


def row_offset(rows: torch.Tensor, whole: torch.Tensor) -> int | None:
    """The index of rows' first row in whole, where rows [R, V] is whole[lo:lo + R] (same storage, same strides,
    contiguous rows); else None."""
    if (rows.dim() != 2 or whole.dim() != 2 or rows.shape[1] != whole.shape[1] or rows.stride() != whole.stride()
            or whole.stride(1) != 1 or rows.dtype != whole.dtype or rows.device != whole.device):
        return None
    step = whole.stride(0) * whole.element_size()
    delta = rows.data_ptr() - whole.data_ptr()
    if delta % step or not 0 <= delta // step <= whole.shape[0] - rows.shape[0]:
        return None
    return delta // step
