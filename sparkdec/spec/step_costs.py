"""Start-up profile of the verify forward's time by token count, for the batch verify-length policy (spec §11.4), and
the timings on trash rows the speculation bypass measures where it first needs them (spec/bypass.py)."""
from __future__ import annotations

import statistics
import time

import torch

from sparkdec.spec.schedule import StepCosts


def profile_points(max_tokens: int, tiers: tuple[int, ...] = ()) -> list[int]:
    """Token counts to time: the graph tiers up to max_tokens, the first count past them (the first eager one),
    powers of two, and max_tokens itself."""
    points = {t for t in tiers if t <= max_tokens} | {max_tokens}
    if tiers and max(tiers) < max_tokens:
        points.add(max(tiers) + 1)
    n = 1
    while n < max_tokens:
        points.add(n)
        n *= 2
    return sorted(points)


@torch.inference_mode()
def profile_verify_costs(runner, max_tokens: int, reps: int = 3) -> StepCosts:
    """Time runner.verify on rows of the trash page (padding rows of no sequence: nothing a request owns is
    written) at a few token counts; the median of reps timed calls after one untimed call (kernel builds)."""
    tiers = tuple(runner.graphs.tiers) if runner.graphs is not None else ()
    points = {n: time_forward(runner, n, reps) for n in profile_points(max_tokens, tiers)}
    return StepCosts(points, tiers)


@torch.inference_mode()
def time_forward(runner, n: int, reps: int = 3) -> float:
    """ms of runner.verify over n rows of the trash page (its device->host read waits for the forward)."""
    pieces = dummy_pieces(n, runner.max_positions - 1, runner.page_size, runner.trash_page)
    return _median_ms(lambda: runner.verify(pieces, list(range(n))), reps)


@torch.inference_mode()
def time_propose(runner, k: int, reps: int = 3) -> float:
    """ms of the greedy propose of k sequences whose blocks sit on the trash page, read back."""
    table = [runner.trash_page] * -(-runner.draft_cfg.block_size // runner.page_size)
    return _median_ms(lambda: runner.propose([table] * k, [0] * k, [0] * k, lambda z, j: z.argmax(-1),
                                             greedy=True)[2].tolist(), reps)


def _median_ms(call, reps: int) -> float:
    """The median ms of reps timed calls after one untimed one (kernel builds, queued work)."""
    times = []
    for i in range(reps + 1):
        t = time.perf_counter()
        call()
        if i:
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def dummy_pieces(n: int, max_len: int, page_size: int, trash_page: int) -> list[tuple]:
    """n causal rows at positions 0, 1, ... in pieces of at most max_len rows (a piece's positions must stay
    inside the RoPE table), every position on the trash page."""
    table = [trash_page] * -(-min(n, max_len) // page_size)
    sizes = [min(max_len, n - at) for at in range(0, n, max_len)]
    return [(table, [0] * k, list(range(k))) for k in sizes]
