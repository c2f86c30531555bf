"""Verify-length policies (spec §11): full block, fixed length, first-failure confidence threshold."""
from __future__ import annotations

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
