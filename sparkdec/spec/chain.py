"""Speculative rounds one propose ahead: once round k's verify is queued, the device works out each sequence's
accepted drafts, next anchor and next position (as the host's greedy, exact-sampled or simulated acceptance will),
and round k+1's propose is queued from them before the host reads round k back. Exact-sampled rows are drawn on the
device with the verify (sampling.draw_tokens) and the host accepts those same drawn tokens. The host's accept, commit and the staging of the
next verify then overlap that propose instead of leaving the device idle between rounds. The device's acceptance
and the propose's staging are one launch on CUDA (ops/triton_chain.py), torch ops elsewhere.

A propose queued for a sequence that round k finished is never used; when sequences joined the batch since, the
next round keeps the queued rows of the others and proposes only the newcomers (spec/round.py _propose_joined).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparkdec.engine.sequence import Sequence
from sparkdec.env import flag
from sparkdec.staging import to_device

# on CUDA the acceptance and the propose's staging are one kernel (ops/triton_chain.py); SPARKDEC_STAGE_KERNEL=0 runs
# their torch form there too (A/B: scripts/ab_chain_stage.py)
STAGE_KERNEL = flag("SPARKDEC_STAGE_KERNEL", True)


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


def accept_reference(first: torch.Tensor, drafts: torch.Tensor, vals: torch.Tensor,
                     simulate_al: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Round k's outcome on the device. first [T]: each packed row's token (its argmax, or its drawn token when the
    row samples); drafts [n, γ]; vals [3, n]: each sequence's anchor row, drafts verified and anchor position. ->
    (next anchors [n], next anchor positions [n]): greedy acceptance keeps the drafts that equal the target's token
    up to the first mismatch (spec/verify.py accept_greedy); simulated acceptance keeps min(AL - 1, ℓ)
    (spec/simulate.py)."""
    rows, ells, starts = vals[0], vals[1], vals[2]
    g = drafts.shape[1]
    k = torch.arange(g, device=drafts.device)
    if simulate_al is None:
        at = (rows[:, None] + k[None, :]).clamp(max=first.numel() - 1)  # [n, γ]
        match = (drafts == first[at]) & (k[None, :] < ells[:, None])
        accepted = match.to(torch.int64).cumprod(1).sum(1)
    else:
        accepted = torch.clamp(ells, max=simulate_al - 1)
    return first[rows + accepted], starts + accepted + 1


def stage_reference(first: torch.Tensor, drafts: torch.Tensor, vals: torch.Tensor, tables: torch.Tensor,
                    out: tuple, tier: int, page_size: int, trash_slot: int, simulate_al: int | None) -> None:
    """ops/triton_chain.stage_kernel in torch ops (CPU engines; the interpreter test's reference)."""
    n, g = vals.shape[1], drafts.shape[1]
    anchors, positions, slots, row_len = out
    next_anchors, starts = accept_reference(first, drafts, vals, simulate_al)
    pos = starts[:, None] + torch.arange(g, device=drafts.device)[None, :]  # [n, γ]
    pages = tables[:n].gather(1, torch.div(pos, page_size, rounding_mode="floor"))
    positions[:n * g].copy_(pos.reshape(-1))
    slots[:n * g].copy_((pages * page_size + pos % page_size).reshape(-1))
    row_len[:n * g].copy_((starts + g)[:, None].expand(n, g).reshape(-1))
    anchors[:n].copy_(next_anchors)
    positions[n * g:tier * g].zero_()
    slots[n * g:tier * g].fill_(trash_slot)
    row_len[n * g:tier * g].fill_(g)
    anchors[n:tier].zero_()
