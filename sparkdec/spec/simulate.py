"""Simulated acceptance for performance work only: every round accepts a fixed number of drafts.

The committed tokens are then NOT the target's output; never use this for correctness.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SimulatedAcceptance:
    acceptance_length: int  # AL per round including the bonus token, 1..γ+1

    def accept(self, argmax: list[int], drafts: list[int]) -> list[int]:
        a = min(self.acceptance_length - 1, len(drafts))
        return list(drafts[:a]) + [argmax[a]]
