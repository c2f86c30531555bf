"""Device ablation of the decode graph: the same A/B as scripts/ab_decode.py, with kernels skipped (their launch
replaced by nothing, outputs left stale). Timing only, the tokens are garbage: the time a kernel's removal saves
inside the PDL chain is the most any fusion or rewrite of it can gain.

usage: python scripts/ab_ablate.py OUT.json [shape] [variant ...]   (variants: ab_decode's and ABLATIONS)
"""
from __future__ import annotations

import ab_decode
import torch
from sparkdec.models import qwen3
from sparkdec.ops import gluon_gemv, gluon_split, triton_attention, triton_fused


class _Skip:
    """Stands in for a Triton kernel: kernel[grid](...) launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


SKIP = _Skip()
COMBINE = {(triton_attention, "_combine_kernel"): SKIP}
SPLIT = {(triton_attention, "_split_kernel"): SKIP, (gluon_split, "_gluon_split_kernel"): SKIP}  # (the short graph's)
ROPE = {(triton_fused, "_qkv_rope_store_kernel"): SKIP}
NORM = {(triton_fused, "_rms_norm_kernel"): SKIP}
SLICES = {(triton_fused, "_rms_norm_slices_kernel"): SKIP}  # the norms after o and down (they sum the slices)


def _raw_q(qkv, num_q, num_kv, q_weight, k_weight, eps, cos, sin, positions, slots, k_cache, v_cache):
    """Stands in for triton_fused.qkv_rope_store: no kernel; the product's raw q columns as q [T, num_q, D] (finite,
    so the tokens stay in range; keys are not written). The split then waits on the qkv product itself."""
    d = k_cache.shape[2]
    return qkv.as_strided((qkv.shape[0], num_q, d), (qkv.stride(0), d, 1)) if num_q else None


def _no_attention(q, k_cache, v_cache, ctx, scale, own_keys=False):
    """Stands in for the attention (split and combine): no kernel; o reads q."""
    return q


ABLATIONS = {
    "no_combine": COMBINE,
    "no_split": SPLIT,
    "no_attention": {**SPLIT, **COMBINE},
    "no_rope_attention": {**ROPE, **SPLIT, **COMBINE},
    "q_as_attention": {(qwen3, "paged_attention"): _no_attention},  # (finite: the tokens stay in range)
    "raw_q_as_attention": {(qwen3, "paged_attention"): _no_attention, (triton_fused, "qkv_rope_store"): _raw_q},
    "no_rope": {(triton_fused, "qkv_rope_store"): _raw_q},  # the split waits on qkv itself: what the q/k norm + RoPE folded into the split can gain at most
    "no_norm": NORM,
    "no_short": {**NORM, **ROPE, **SPLIT, **COMBINE},
}
_embedding = torch.nn.functional.embedding


def _clamped_embedding(ids, weight, *args, **kwargs):
    """Stands in for F.embedding: ids clamped into the vocabulary (a garbage forward's NaN logits pick id V)."""
    return _embedding(ids.clamp(0, weight.shape[0] - 1), weight, *args, **kwargs)


CLAMP = {(torch.nn.functional, "embedding"): _clamped_embedding}
ABLATIONS["clamped"] = CLAMP  # the baseline of the nowait_* ablations (one clamp kernel more per forward)
# the 4B products not waiting for the kernel before them (gluon_gemv.NO_WAIT): what each boundary's wait costs
_4B = {"qkv": (6144, 2560), "o": (2560, 4096), "gate_up": (19456, 2560), "down": (2560, 9728)}
for _names in (["qkv"], ["o"], ["gate_up"], ["down"], ["gate_up", "down"], list(_4B)):
    ABLATIONS["nowait_" + "_".join(_names) if len(_names) < 4 else "nowait_all"] = {
        (gluon_gemv, "NO_WAIT"): {_4B[n] for n in _names}, **CLAMP}
# the products alone as separate kernels with no waits: what streaming the bytes op by op costs without any dependency
ABLATIONS["nowait_no_attention"] = {**ABLATIONS["nowait_all"], **SPLIT, **COMBINE}
ABLATIONS["no_short_slices"] = {**ABLATIONS["no_short"], **SLICES, **CLAMP}  # the products alone, waits kept
ABLATIONS["nowait_no_short"] = {**ABLATIONS["nowait_all"], **ABLATIONS["no_short"], **SLICES}

if __name__ == "__main__":
    ab_decode.VARIANTS.update(ABLATIONS)
    ab_decode.main()
