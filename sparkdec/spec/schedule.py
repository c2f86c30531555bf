"""Verify-length policies (spec §11): full block, fixed length, first-failure threshold; Algorithm 1 across a batch."""
from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class VerifyPolicy:
    verify_len: int | None = None  # fixed ℓ (None = full block)
    min_confidence: float | None = None  # first-failure threshold on individual confidences

    def choose(self, confidences: list[float], room: int) -> int:
        """ℓ for one sequence: how many leading drafts to verify. `room` = tokens it may still emit.
        NOTE: non-anticipating (spec §11.5): ℓ depends on c_0..c_{ℓ}, never on drafts after d_ℓ."""
        gamma = len(confidences)
        ell = gamma if self.verify_len is None else min(self.verify_len, gamma)
        if self.min_confidence is not None and self.min_confidence > 0:
            for k in range(ell):
                if confidences[k] < self.min_confidence:
                    ell = k
                    break
        return max(0, min(ell, room - 1))


def survivals(confidences: list[float]) -> list[float]:
    """a_j = c_0 ... c_{j-1} for j = 1 .. γ: the chance that drafts d_1 .. d_j are all accepted (spec §8)."""
    out, a = [], 1.0
    for c in confidences:
        a *= float(c)
        out.append(a)
    return out


def batch_verify_lengths(surv: list[list[float]], caps: list[int], step_rate, other_rows: int = 0) -> list[int]:
    """Algorithm 1 (spec §11.4): ℓ per sequence maximising expected tokens per second, with its early stop.
    surv[r]: a_{r,1..γ}; caps[r]: at most this many drafts for r; step_rate(B): forwards per second with B tokens;
    other_rows: rows of the same forward outside these sequences (they count in B, not in the expected tokens'
    comparison: both sides of every test carry them).
    Candidates (r, j) are visited by decreasing a_{r,j}, ties to the smaller j (so every ℓ_r stays a prefix); the
    first one that does not raise the objective stops the search.
    NOTE: non-anticipating (spec §11.5): admitting (r, j) depends on a_{r,j} and on candidates ranked above it,
    never on d_j itself, because a sequence's later candidates are never ranked above its earlier ones."""
    ells = [0] * len(surv)
    tokens, expected = other_rows + len(surv), len(surv)
    best = expected * step_rate(tokens)
    order = sorted(((a[j - 1], j, r) for r, a in enumerate(surv) for j in range(1, min(caps[r], len(a)) + 1)),
                   key=lambda x: (-x[0], x[1], x[2]))
    for a, j, r in order:
        gain = (expected + a) * step_rate(tokens + 1)
        if gain <= best:
            break
        ells[r], tokens, expected, best = j, tokens + 1, expected + a, gain
    return ells


class StepCosts:
    """Verify forward time by token count, from a start-up profile at a few token counts, forced non-decreasing.
    Up to the largest graph tier a count costs what the smallest profiled count at or above it does (a graph replays
    its whole tier: a staircase); past it, eager forwards, the cost is interpolated linearly between the profiled
    counts past the tiers (and extended from the last two)."""

    def __init__(self, points: dict[int, float], tiers: tuple[int, ...] = ()):
        if not points:
            raise ValueError("a step-cost profile needs at least one token count")
        self.counts = sorted(points)
        self.top_tier = max(tiers, default=0)
        self.ms, worst = [], 0.0
        for n in self.counts:  # a larger forward never counts as cheaper (timing noise)
            worst = max(worst, float(points[n]))
            self.ms.append(worst)

    def cost_ms(self, tokens: int) -> float:
        c, ms = self.counts, self.ms
        i = bisect.bisect_left(c, tokens)  # the first profiled count >= tokens
        # profiled; a graph tier's staircase; or no eager count below it to interpolate from
        if i < len(c) and (i == 0 or c[i] == tokens or tokens <= self.top_tier or c[i - 1] <= self.top_tier):
            return ms[i]
        lo = min(i, len(c) - 1) - 1  # between eager counts lo and lo + 1 (past the profile: extended from them)
        if lo < 0 or c[lo] <= self.top_tier:  # past the profile with one eager count: in proportion to it
            return ms[-1] * tokens / c[-1]
        return ms[lo] + (ms[lo + 1] - ms[lo]) * (tokens - c[lo]) / (c[lo + 1] - c[lo])

    def rate(self, tokens: int) -> float:
        return 1e3 / self.cost_ms(tokens)
