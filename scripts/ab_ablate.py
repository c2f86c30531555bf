"""Device ablation of the decode graph: the same A/B as scripts/ab_decode.py, with kernels skipped (their launch
replaced by nothing, outputs left stale). Timing only, the tokens are garbage: the time a kernel's removal saves
inside the PDL chain is the most any fusion or rewrite of it can gain.

usage: python scripts/ab_ablate.py OUT.json [shape] [variant ...]   (variants: ab_decode's and ABLATIONS)
"""
from __future__ import annotations

import ab_decode
from sparkdec.ops import gluon_split, triton_attention, triton_fused


class _Skip:
    """Stands in for a Triton kernel: kernel[grid](...) launches nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


SKIP = _Skip()
COMBINE = {(triton_attention, "_combine_kernel"): SKIP}
SPLIT = {(triton_attention, "_split_kernel"): SKIP, (gluon_split, "_gluon_split_kernel"): SKIP}  # (the short graph's)
ROPE = {(triton_fused, "_qkv_rope_store_kernel"): SKIP}
NORM = {(triton_fused, "_rms_norm_kernel"): SKIP}
ABLATIONS = {
    "no_combine": COMBINE,
    "no_split": SPLIT,
    "no_attention": {**SPLIT, **COMBINE},
    "no_rope_attention": {**ROPE, **SPLIT, **COMBINE},
    "no_norm": NORM,
    "no_short": {**NORM, **ROPE, **SPLIT, **COMBINE},
}

if __name__ == "__main__":
    ab_decode.VARIANTS.update(ABLATIONS)
    ab_decode.main()
