"""Acceptance rules (spec §12.3): greedy prefix match, exact sampled match, rejection sampling."""
from __future__ import annotations

import torch

from sparkdec.engine.runner import LogitRows, rows_tensor
from sparkdec.sampling import (STREAM_ACCEPT, STREAM_RESIDUAL, STREAM_TARGET, SamplingParams, fused, fused_rows,
                               processed_probs, sample_from, sample_token, uniform_noise)


def accept_greedy(target_tokens: list[int], drafts: list[int]) -> list[int]:
    """target_tokens: argmax of the ℓ+1 verify rows; drafts: d_1..d_ℓ. Returns committed tokens
    (accepted drafts then the bonus/correction), i.e. A + 1 tokens."""
    out = []
    for k, d in enumerate(drafts):
        if d != target_tokens[k]:
            break
        out.append(d)
    out.append(target_tokens[len(out)])
    return out


def accept_exact(logits: torch.Tensor, drafts: list[int], params: SamplingParams, seed: int, s: int) -> list[int]:
    """Sample the target at each row with noise keyed on (seed, position); keep the matching prefix.
    Row k (position s+k) emits the token for position s+k+1, exactly as plain sampled decoding would. Rows are
    drawn one at a time up to the first mismatch (each draw sorts a whole row for top-p: drawing all ℓ+1 rows
    in one batch cost more on the H200, kernels_h200_2026-11-30_session6_sampled.json); the fused sampler draws
    them all in one call."""
    if fused(logits.logits if isinstance(logits, LogitRows) else logits):
        rows = rows_tensor(logits)
        return accept_greedy(fused_rows(rows[:len(drafts) + 1], params, seed, s + 1).tolist(), drafts)
    out = []
    for k in range(len(drafts) + 1):
        token = sample_token(logits[k], params, seed, s + k + 1)
        out.append(token)
        if k == len(drafts) or token != drafts[k]:
            break
    return out


def accept_rejection(logits: torch.Tensor, z: torch.Tensor, drafts: list[int], params: SamplingParams,
                     seed: int, s: int) -> list[int]:
    """Speculative rejection sampling against q_k = softmax(z_k / T), the distribution d_{k+1} was drawn
    from (Markov-corrected, spec §17.8). logits [ℓ+1, V], z [≥ℓ, V]."""
    out = []
    for k, d in enumerate(drafts):
        pos = s + k + 1
        p = processed_probs(logits[k], params)
        q = torch.softmax(z[k].float() / params.temperature, dim=-1)
        u = float(uniform_noise(seed, pos, STREAM_ACCEPT, 1, "cpu")[0])
        if u * float(q[d]) <= float(p[d]):
            out.append(d)
            continue
        residual = (p - q).clamp_(min=0)
        if float(residual.sum()) <= 1e-12:
            residual = p
        out.append(sample_from(residual / residual.sum(), seed, pos, STREAM_RESIDUAL))
        return out
    pos = s + len(drafts) + 1
    out.append(sample_from(processed_probs(logits[len(drafts)], params), seed, pos, STREAM_TARGET))
    return out
