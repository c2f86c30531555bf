"""Speculative rounds one propose ahead: once round k's verify is queued, the device works out each sequence's
accepted drafts, next anchor and next position (as the host's greedy, exact-sampled or simulated acceptance will),
and round k+1's propose is queued from them before the host reads round k back. Exact-sampled rows are drawn on the
device with the verify (sampling.draw_tokens) and the host accepts those same drawn tokens. The host's accept, commit and the staging of the
next verify then overlap that propose instead of leaving the device idle between rounds.

A propose queued for a sequence that round k finished is never used; when sequences joined the batch since, the
next round keeps the queued rows of the others and proposes only the newcomers (spec/round.py _propose_joined).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparkdec.engine.sequence import Sequence
from sparkdec.staging import to_device


@dataclass
class PendingPropose:
    seqs: list[Sequence]
    drafts: torch.Tensor  # [B, γ] on the device
    z: torch.Tensor  # [B, γ, V]
    conf: torch.Tensor  # [B, γ]
    events: list | None = None  # benchmarks: (start, proposed, verified) CUDA events, the first two recorded
    dropped: set = field(default_factory=set)  # id(seq) of those whose round committed less than the device assumed

    def holds(self, seq: Sequence) -> bool:
        return id(seq) not in self.dropped and any(s is seq for s in self.seqs)

    def drop(self, seq: Sequence) -> None:
        """The sequence committed fewer tokens than the device accepted (and goes on): its queued rows are not its
        next propose."""
        self.dropped.add(id(seq))

    def take(self, spec: list[Sequence]):
        """(drafts, z, conf) rows of these sequences, in their order, or None when one of them was not proposed."""
        where = {id(s): i for i, s in enumerate(self.seqs) if id(s) not in self.dropped}
        if any(id(s) not in where for s in spec):
            return None
        idx = [where[id(s)] for s in spec]
        if idx == list(range(len(spec))):
            return self.drafts[:len(spec)], self.z[:len(spec)], self.conf[:len(spec)]
        sel = to_device(idx, self.drafts.device)
        return self.drafts[sel], self.z[sel], self.conf[sel]


def device_accept(first: torch.Tensor, drafts: torch.Tensor, rows: torch.Tensor, ells: torch.Tensor,
                  starts: torch.Tensor, simulate_al: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Round k's outcome on the device. first [T]: each packed row's token (its argmax, or its drawn token when
    the row samples); drafts [B, γ]; rows [B]: each
    sequence's anchor row; ells [B]: drafts verified; starts [B]: anchor positions. -> (next anchors [B], next
    anchor positions [B]): greedy acceptance keeps the drafts that equal the target's argmax up to the first
    mismatch (spec/verify.py accept_greedy); simulated acceptance keeps min(AL - 1, ℓ) (spec/simulate.py)."""
    g = drafts.shape[1]
    k = torch.arange(g, device=drafts.device)
    if simulate_al is None:
        at = (rows[:, None] + k[None, :]).clamp(max=first.numel() - 1)  # [B, γ]
        match = (drafts == first[at]) & (k[None, :] < ells[:, None])
        accepted = match.to(torch.int64).cumprod(1).sum(1)
    else:
        accepted = torch.clamp(ells, max=simulate_al - 1)
    return first[rows + accepted], starts + accepted + 1
