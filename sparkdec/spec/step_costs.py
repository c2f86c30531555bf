"""Start-up profile of the verify forward's time by token count, for the batch verify-length policy (spec §11.4)."""
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
    points = {}
    for n in profile_points(max_tokens, tiers):
        pieces = dummy_pieces(n, runner.max_positions - 1, runner.page_size, runner.trash_page)
        times = []
        for i in range(reps + 1):
            t = time.perf_counter()
            runner.verify(pieces, list(range(n)))  # its device->host read waits for the forward
            if i:
                times.append((time.perf_counter() - t) * 1e3)
        points[n] = statistics.median(times)
    return StepCosts(points, tiers)


def dummy_pieces(n: int, max_len: int, page_size: int, trash_page: int) -> list[tuple]:
    """n causal rows at positions 0, 1, ... in pieces of at most max_len rows (a piece's positions must stay
    inside the RoPE table), every position on the trash page."""
    table = [trash_page] * -(-min(n, max_len) // page_size)
    sizes = [min(max_len, n - at) for at in range(0, n, max_len)]
    return [(table, [0] * k, list(range(k))) for k in sizes]
