"""CUDA graphs of the sampler's race: its dozen Triton launches (ops/triton_nucleus.py) replayed as one.

A plain sampled step or a verify's device-drawn rows race over logits a target graph wrote: a static tensor, so the
race over it can be captured too. One graph per form (the logits' address and shape, the filter); the rows' keys go
into the graph's static input before each replay (staging.copy_into) and its tokens are copied out after it, so a
step's tokens stay valid when the next step replays the same graph. A form is captured on its CAPTURE_AFTER-th use
(a batch shape seen once stays eager), at most MAX_GRAPHS are kept (the least recently used goes), all in one memory
pool: they replay one at a time on one stream and hold nothing between replays but their inputs and outputs.
Replay runs the same kernels on the same inputs as the eager race: the same tokens (tests/test_gpu.py).
"""
from __future__ import annotations

from collections import OrderedDict

import torch

from sparkdec.env import flag
from sparkdec.sampling import SamplingParams, keyed_kernel_race, kernel_race, kernel_sampler_on
from sparkdec.staging import copy_into

SAMPLER_GRAPHS = flag("SPARKDEC_SAMPLER_GRAPHS", True)
CAPTURE_AFTER = 2  # uses of a form before it is captured (the first runs eagerly, which also compiles its kernels)
MAX_GRAPHS = 32  # forms kept
MAX_SEEN = 1024  # forms counted before the counts start over


class SamplerGraphs:
    """Captured races, by form. race(logits, params, keys) is kernel_race(logits, params, keys), bit for bit."""

    def __init__(self):
        self.graphs: OrderedDict[tuple, tuple] = OrderedDict()  # form -> (graph, keys [R] int64, tokens [R], arrivals)
        self.seen: dict[tuple, int] = {}
        self.pool = None
        self.captures = 0  # (tests and profiles: how many forms were captured)
        self.broken = False  # a capture failed: every race eager from then on

    def takes(self, logits: torch.Tensor) -> bool:
        """Can a graph race over these logits (CUDA, the kernel sampler on, rows contiguous)?"""
        return SAMPLER_GRAPHS and not self.broken and logits.is_cuda and logits.stride(-1) == 1 and kernel_sampler_on()

    def race(self, logits: torch.Tensor, params: SamplingParams, keys: list[int]) -> torch.Tensor:
        """Each row's token [R] int64 (a fresh tensor) given logits [R, V] and each row's key."""
        form = (logits.data_ptr(), tuple(logits.shape), logits.stride(0), logits.dtype, params.temperature,
                params.top_k, params.top_p)
        entry = self.graphs.get(form)
        if entry is None:
            if len(self.seen) >= MAX_SEEN:
                self.seen.clear()
            self.seen[form] = self.seen.get(form, 0) + 1
            if self.seen[form] < CAPTURE_AFTER:
                return kernel_race(logits, params, keys)
            del self.seen[form]
            try:
                entry = self.graphs[form] = self._capture(logits, params)
            except RuntimeError as exc:  # (torch.AcceleratorError is one) the race stays eager: same tokens
                import warnings

                warnings.warn(f"sampler graph capture failed ({exc}); sampling eagerly")
                self.broken = True
                return kernel_race(logits, params, keys)
            if len(self.graphs) > MAX_GRAPHS:
                self.graphs.popitem(last=False)
        self.graphs.move_to_end(form)
        graph, static_keys, tokens, _ = entry
        copy_into(static_keys, keys)
        graph.replay()
        return tokens.clone()

    def _capture(self, logits: torch.Tensor, params: SamplingParams) -> tuple:
        """The race over these logits as a graph -> (graph, static keys, static tokens, the arrival counters it
        uses: held so they outlive any reallocation of ops/triton_nucleus's)."""
        from sparkdec.engine.graphs import capture_one
        from sparkdec.ops.triton_nucleus import _arrivals

        keys = torch.zeros(logits.shape[0], dtype=torch.int64, device=logits.device)
        arrivals = _arrivals(logits.device, logits.shape[0])  # (sized before the capture, never inside it)
        graph, tokens = capture_one(lambda _: keyed_kernel_race(logits, params, keys), 0, self.pool)
        self.pool = graph.pool()
        self.captures += 1
        return graph, keys, tokens, arrivals
