"""Coupled drafts for exact sampled acceptance: the drafter races with the noise the target will draw with.

In `exact` mode the target samples each verify row with the exponential race of `sampling.sample_rows`: the token
at position t is argmax_i p_i / E_i, with E = -log(u) and u keyed on (seed, t, STREAM_TARGET). A draft that runs
the same race over its own distribution q (argmax_i q_i / E_i, i.e. the Gumbel-max argmax of z / T - log E) lands
on the target's token whenever q and p agree well enough, not only when the target happens to sample its mode,
as an argmax draft does. Which draft is proposed never changes what is emitted (the target's draws decide every
token), so the output stays exactly plain sampled decoding's; only the acceptance length changes.

The draft's race is a heuristic: float32, the request's temperature, no top-k or top-p (top-p's sort per slot would
cost more than the rare draft in its dropped tail). CUDA runs it inside the fused Markov chain (and its propose
graph); elsewhere the propose's pick runs coupled_token.
"""
from __future__ import annotations

import torch

from sparkdec.sampling import STREAM_TARGET, SamplingParams, _mix, key_base, keyed_uniforms

# coupled drafts for exact-sampled sequences; False: their drafts are the drafter's argmax (the A/B baseline)
COUPLED = True
# The race ignores top-k and top-p, so with tight filters it drafts tokens the target cannot emit. Tiny pair, CPU,
# 8 prompts, tokens per round argmax -> coupled (coupling_filters_cpu_tiny_2026-11-30.json): T 0.8 top-k 1
# 3.53 -> 2.20, top-k 3 2.10 -> 2.08, top-p 0.5 2.63 -> 2.21; but top-k 20 1.89 -> 2.26, T 1 top-k 50 1.38 -> 1.78
# (and top-p 0.9 at T 0.7 2.15 -> 2.24 on the H200). Requests with a top-k below MIN_TOP_K or a top-p below
# MIN_TOP_P keep argmax drafts.
MIN_TOP_K, MIN_TOP_P = 20, 0.9


def couples(params: SamplingParams) -> bool:
    """Does a sampled request with these filters draft the coupled race?"""
    return COUPLED and (params.top_k == 0 or params.top_k >= MIN_TOP_K) and params.top_p >= MIN_TOP_P


def coupled_gumbels(seed: int, anchor_position: int, gamma: int, vocab: int, device) -> torch.Tensor:
    """[γ, V] float32: slot k's -log E, the target's race noise at position anchor_position + k + 1 (the token
    slot k proposes)."""
    keys = [_mix(seed, anchor_position + k + 1, STREAM_TARGET) for k in range(gamma)]
    u = keyed_uniforms(keys, vocab, device)  # [γ, V] float64 in (0, 1)
    return (-torch.log(-torch.log(u))).float()


def coupled_token(z: torch.Tensor, params: SamplingParams, gumbel: torch.Tensor) -> torch.Tensor:
    """z [V] (the draft's corrected logits for one slot), gumbel [V] -> the draft token (0-dim device tensor):
    argmax of z / T + gumbel (ops/triton_markov.py's coupled chain computes the same scores)."""
    return torch.argmax(z.float() / params.temperature + gumbel)


def race_rows(seqs, coupled: list[bool]) -> list | None:
    """Per sequence, (key base, temperature) of its coupled race or None; None when no sequence couples."""
    if not any(coupled):
        return None
    return [(key_base(s.seed, STREAM_TARGET), s.params.temperature) if c else None for s, c in zip(seqs, coupled)]


def race_columns(coupled: list, anchor_positions: list[int]) -> tuple[list, list, list]:
    """Per row: key bases, temperatures (0: argmax) and anchor positions (0 for argmax rows) of the coupled race."""
    return ([c[0] if c else 0 for c in coupled], [float(c[1]) if c else 0.0 for c in coupled],
            [s if c else 0 for c, s in zip(coupled, anchor_positions)])


def race_tensors(coupled: list, anchor_positions: list[int], device):
    """The fused chain's coupling: race_columns as (int64 [B], float32 [B], int64 [B]) tensors on the device."""
    keys, temps, apos = race_columns(coupled, anchor_positions)
    return (torch.tensor(keys, dtype=torch.long).to(device), torch.tensor(temps, dtype=torch.float32).to(device),
            torch.tensor(apos, dtype=torch.long).to(device))
