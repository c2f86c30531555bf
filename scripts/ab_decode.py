"""Device A/B of decode-path kernel variants in one process: each variant patches module settings, builds a fresh
engine (graphs recaptured) on the same random Qwen3-4B-shaped weights and times graph replays and the propose. (The L2-prefetch
and attention-split variants it first ran are in benchmarks/results/l2_prefetch_ab_h200_2026-11-29.json.)

usage: python scripts/ab_decode.py OUT.json [shape] [variant ...]   (variants: names in VARIANTS; default all;
name#2 runs a variant again, interleaved with the others, to see the run-to-run spread; AB_CONTEXTS=1024 picks the
contexts, default 1024,8192; AB_PROPOSE_ONLY=1 builds only the speculative engine (propose and its verify graphs);
AB_PLAIN_ONLY=1 only the plain one). The engines run with the model's own context window (40960 for the Qwen3 shapes,
the engine's default) since session 16; variant window_ctx gives the earlier ctx + 1024.
"""
from __future__ import annotations

import gc
import json
import os
import sys

import torch

from sparkdec.bench import kernels as bench_kernels
from sparkdec.bench.kernels import (copy_bandwidth, decode_ms, graph_replay_ms, make_engine, prefill, propose_replay_ms,
                                    propose_time)
from sparkdec.bench.shapes import param_bytes, random_models
from sparkdec.engine import graphs
from sparkdec.engine.graphs import patched
from sparkdec.ops import gluon_gemv, gluon_mlp, triton_attention, triton_fused, triton_gemm, triton_markov

VARIANTS = {
    "base": {},
    "fine0": {(triton_attention, "FINE_END"): 0},
    "fine2k": {(triton_attention, "FINE_END"): 2048},
    "fine4k": {(triton_attention, "FINE_END"): 4096},
    "fine3k": {(triton_attention, "FINE_END"): 3072},  # (session 21: fine3k, fine4k no faster at 2k-8k, fine_end_ab_*)
    "fine2k_p128": {(triton_attention, "FINE_END"): 2048, (triton_attention, "PROGRAMS_ONE_ROW"): 128,
                    (triton_attention, "PROGRAMS"): 64},
    "p1_128": {(triton_attention, "PROGRAMS_ONE_ROW"): 128},  # (session 30) the lone row's alone, PROGRAMS kept
    "pdl_late": {(triton_gemm, "PDL_MODE"): 1},
    "pdl_early": {(triton_gemm, "PDL_MODE"): 2},
    "pdl_off": {(triton_gemm, "PDL_MODE"): 0},
    "split_w4_b64": {(triton_attention, "SPLIT_WARPS"): 4, (triton_attention, "SPLIT_BLOCK_N"): 64},
    "split_w8_b64": {(triton_attention, "SPLIT_WARPS"): 8, (triton_attention, "SPLIT_BLOCK_N"): 64},
    "split_w8_b128": {(triton_attention, "SPLIT_WARPS"): 8, (triton_attention, "SPLIT_BLOCK_N"): 128,
                      (triton_attention, "FINE_END"): 0},
    "programs32": {(triton_attention, "PROGRAMS"): 32},
    "programs64": {(triton_attention, "PROGRAMS"): 64},
    "programs128": {(triton_attention, "PROGRAMS"): 128},
    "markov_v64_w4": {(triton_markov, "BLOCK_V"): 64, (triton_markov, "STEP_WARPS"): 4},
    "markov_v128_w4": {(triton_markov, "BLOCK_V"): 128, (triton_markov, "STEP_WARPS"): 4},
    "markov_v128_w8": {(triton_markov, "BLOCK_V"): 128, (triton_markov, "STEP_WARPS"): 8},
    "markov_v256_w8": {(triton_markov, "BLOCK_V"): 256, (triton_markov, "STEP_WARPS"): 8},
    "chain_off": {(triton_markov, "CHAIN"): False},
    "chain_132": {(triton_markov, "CHAIN"): True, (triton_markov, "CHAIN_PROGRAMS"): 132},
    "chain_264": {(triton_markov, "CHAIN"): True, (triton_markov, "CHAIN_PROGRAMS"): 264},
    "chain_396": {(triton_markov, "CHAIN"): True, (triton_markov, "CHAIN_PROGRAMS"): 396},
    "chain_pingpong": {(triton_markov, "CHAIN_PINGPONG"): True},
    "chain_forward": {(triton_markov, "CHAIN_PINGPONG"): False},
    # session 8: the query tile for every split-kernel call (rows x heads; a block runs in passes), its stages
    "qt16": {(triton_attention, "QUERY_TILE"): 16},
    "qt32": {(triton_attention, "QUERY_TILE"): 32},
    "qt16_w2": {(triton_attention, "QUERY_TILE"): 16, (triton_attention, "SPLIT_WARPS"): 2},
    "stages1": {(triton_attention, "SPLIT_STAGES"): 1},
    # session 9: every product on the Triton kernel vs the Gluon product for the shapes in its table
    # (SPARKDEC_GLUON_CONFIGS names the table to try), with PDL modes 1 and 2
    "triton": {(triton_gemm, "GLUON"): False},
    "gluon": {(triton_gemm, "GLUON"): True, (triton_gemm, "PDL_KINDS"): {}},
    "gluon_pdl2": {(triton_gemm, "GLUON"): True, (triton_gemm, "PDL_MODE"): 2},
    # PDL mode per kind of kernel (triton_gemm.PDL_KINDS): g = Gluon products, s = all short kernels, n = RMSNorm,
    # c = attention combine, r = q/k norm + RoPE; the kinds not named stay at mode 1
    "g2_s1": {(triton_gemm, "PDL_KINDS"): {"gluon": 2}},
    "g2_s2": {(triton_gemm, "PDL_KINDS"): {"gluon": 2, "norm": 2, "rope": 2, "split": 2, "combine": 2}},
    "g1_s2": {(triton_gemm, "PDL_KINDS"): {"gluon": 1, "norm": 2, "rope": 2, "split": 2, "combine": 2}},
    "g2_n2c2": {(triton_gemm, "PDL_KINDS"): {"gluon": 2, "norm": 2, "combine": 2}},
    "g2_n2": {(triton_gemm, "PDL_KINDS"): {"gluon": 2, "norm": 2}},
    "g2_n2r2": {(triton_gemm, "PDL_KINDS"): {"gluon": 2, "norm": 2, "rope": 2}},
    # session 10: the shipped plan plus the q/k norm + RoPE kernel at mode 2 (the split kernel alone at 2 is slower)
    "g2_n2c2r2": {(triton_gemm, "PDL_KINDS"): {"gluon": 2, "norm": 2, "combine": 2, "rope": 2}},
}


def _tiles(triton: dict | None = None, gluon: dict | None = None) -> dict:
    """A variant that changes tile-table entries ((weight rows, K) -> config) of the Triton and Gluon products.
    The split-K of a shape is the Triton entry's third field and fixes the bits: both kernels read it."""
    return {(triton_gemm, "CONFIGS"): {**triton_gemm.CONFIGS, **(triton or {})},
            (gluon_gemv, "CONFIGS"): {**gluon_gemv.CONFIGS, **(gluon or {})}}


# session 10: tiles and split-K of the Qwen3-4B Gluon products inside the decode graph (the probe timed each product
# back to back with itself; in a layer the next kernel's programs can only start where shared memory is left)
QKV, O, GATE_UP, DOWN = (6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)
LM_HEAD = (151936, 2560)
VARIANTS.update({
    "o_s4": _tiles({O: (32, 256, 4, 4, 4)}),
    "o_s16": _tiles({O: (32, 256, 16, 4, 4)}, {O: (64, 128, 2, 1)}),
    "o_st2": _tiles(gluon={O: (64, 128, 2, 1)}),
    "down_s2": _tiles({DOWN: (32, 128, 2, 4, 4)}),
    "down_s8": _tiles({DOWN: (32, 64, 8, 4, 4)}, {DOWN: (64, 64, 12, 1)}),
    "down_st4": _tiles(gluon={DOWN: (64, 128, 4, 1)}),
    "gu_st3": _tiles(gluon={GATE_UP: (64, 128, 3, 1)}),
    "coresident": _tiles(gluon={GATE_UP: (64, 128, 2, 1), DOWN: (64, 128, 3, 1)}),
    "qkv_bk128": _tiles(gluon={QKV: (64, 128, 4, 1)}),
    "qkv_st2": _tiles(gluon={QKV: (64, 256, 2, 1)}),
    # (session 26) qkv's 96 programs with deeper rings (more bytes in flight, one program per SM from 5 stages)
    "qkv_st4": _tiles(gluon={QKV: (64, 256, 4, 1)}),
    "qkv_st5": _tiles(gluon={QKV: (64, 256, 5, 1)}),
    "qkv_st6": _tiles(gluon={QKV: (64, 256, 6, 1)}),
    "qkv_bk128_st8": _tiles(gluon={QKV: (64, 128, 8, 1)}),
    # (session 26) the 4B LM head (tied embedding, 778 MB) as a Gluon product (its first ring filled before the PDL
    # wait; fp32 logits rounded through bf16 as the Triton kernel's epilogue does) or other Triton tiles
    "lm_gluon_s4": _tiles(gluon={LM_HEAD: (64, 128, 4, 1)}),
    "lm_gluon_bk256": _tiles(gluon={LM_HEAD: (64, 256, 3, 1)}),
    "lm_triton_bn64": _tiles({LM_HEAD: (64, 128, 1, 4, 4)}),
    # weight tiles the o product requests before its PDL wait: its prefetch floods HBM while the attention combine
    # (latency-bound) runs; and the split kernel at PDL mode 2 (the combine starts while it runs)
    "o_pre0": {(gluon_gemv, "PREFETCH"): {O: 0}},
    "o_pre1": {(gluon_gemv, "PREFETCH"): {O: 1}},
    "o_pre2": {(gluon_gemv, "PREFETCH"): {O: 2}},
    "split2": {(triton_gemm, "PDL_KINDS"): {"gluon": 2, "norm": 2, "combine": 2, "split": 2}},
    "split2_o_pre1": {(triton_gemm, "PDL_KINDS"): {"gluon": 2, "norm": 2, "combine": 2, "split": 2},
                      (gluon_gemv, "PREFETCH"): {O: 1}},
})
# the drafter's context write inside the verify graph (fc over the 5 taps, then each draft layer's k/v rows): shapes
# not in either table ran the Triton kernel's default tile without split-K
# the attention combine's chunk loops unrolled (same bits; every chunk's loads in one basic block)
VARIANTS["combine_unroll"] = {(triton_attention, "COMBINE_UNROLL"): True}
# the split kernel's warps and key step (registers: 4 warps x 64 keys spill 1456 B per thread, 8 x 32 none)
VARIANTS["split_b32"] = {(triton_attention, "SPLIT_BLOCK_N"): 32}
# session 21 (staged): the split kernel's register cap, three or four programs per SM (triton_attention.SPLIT_MAXNREG)
VARIANTS["split_r168"] = {(triton_attention, "SPLIT_MAXNREG"): 168}
VARIANTS["split_r128"] = {(triton_attention, "SPLIT_MAXNREG"): 128}
VARIANTS["split_w8_b32"] = {(triton_attention, "SPLIT_WARPS"): 8, (triton_attention, "SPLIT_BLOCK_N"): 32}
FC, KV = (2560, 12800), (2048, 2560)
for _s in (4, 5, 10):
    VARIANTS[f"ctx_s{_s}"] = _tiles({FC: (32, 128, _s, 4, 4), KV: (32, 128, _s, 4, 4)},
                                    {FC: (64, 128, 4, 1), KV: (64, 128, 4, 1)})
VARIANTS["ctx_s5_triton"] = _tiles({FC: (32, 128, 5, 4, 4), KV: (32, 128, 5, 4, 4)})
# session 11: q/k norm + RoPE + K/V store fused into the split kernel: measured slower, removed
# (rope_attention_fused_ab_h200_2026-11-30.json; the code is in commit d32f530)
# session 11: Gluon products triggering their dependents after the main loop or halfway: no gain, removed
# (gluon_pdl_timing_ab_h200_2026-11-30.json)
# session 11 (staged): gate_up + SiLU -> down + residual in one persistent Gluon launch (ops/gluon_mlp.py)
VARIANTS["fused_mlp"] = {(triton_gemm, "FUSED_MLP"): True}
VARIANTS["fused_mlp_s8"] = {(triton_gemm, "FUSED_MLP"): True, (gluon_mlp, "STAGES"): 8}  # one CTA per SM, deeper ring
# session 12: the split kernel prefetching o's weights (and gate_up's head) into L2: slower, removed
# (l2_weight_prefetch_ab_h200_2026-11-30.json)
# session 12: the split kernel combining a lone decode row's splits itself (its last program per kv head, four heads
# one after another): slower, 2.79 -> 3.28-3.39 ms at 1k, 3.36 -> 4.50 at 8k; removed (code in commit 84d73f3;
# combine_in_split_ab_h200_2026-11-30.json)
# session 12: the persistent MLP on a grid that balances its task lists (304 gate_up tiles, 160 down tasks for the 4B)
for _g in (152, 160, 208):
    VARIANTS[f"fused_mlp_g{_g}"] = {(triton_gemm, "FUSED_MLP"): True, (gluon_mlp, "GRID"): _g}
# session 14: the o and down products leave their split-K slices to the RMSNorm kernel after them (ops/partials.py;
# shipped on; "sum_off" is the old finish). The residual loaded right after the products' PDL wait instead of in the
# last program's tail made no difference (2.824 vs 2.825 ms, sum_in_norm_first_layout_ab_*), removed
VARIANTS["sum_in_norm"] = {(triton_gemm, "SUM_IN_NORM"): True}
VARIANTS["sum_off"] = {(triton_gemm, "SUM_IN_NORM"): False}
# (session 14: the slices' norm kernel on 8 or 16 warps was no faster than on 4, and its sum of squares then took
# another order than the plain norm kernel's: other bits)
# session 15: the RMSNorm after o took 6.9 us after o ended against 3.3 after down (graph_timeline_*_session15):
# gate_up's ring fill (19.5 MB) floods HBM while it runs. Weight tiles gate_up / qkv request before their PDL wait,
# and the norms letting the next kernel launch only at their end
for _p in (0, 1, 2):
    VARIANTS[f"gu_pre{_p}"] = {(gluon_gemv, "PREFETCH"): {GATE_UP: _p}}
    VARIANTS[f"qkv_pre{_p}"] = {(gluon_gemv, "PREFETCH"): {QKV: _p}}
    VARIANTS[f"o_pre{_p}"] = {(gluon_gemv, "PREFETCH"): {O: _p}}  # (session 21: o's ring fill during the split)
# (session 32, today's code: gate_up filling 2 or 3 of its 4 tiles before its wait is slower, 1k decode 2.508/2.507 ->
# 2.530/2.522 and 2.527/2.517 ms/token; gu_pre_ab_h200_2026-12-02_session32.json)
VARIANTS["gu_pre3"] = {(gluon_gemv, "PREFETCH"): {GATE_UP: 3}}
# (session 21: o's ring fill held 0.5-3 us at its start, "o_delay*", no faster at 1k: o_delay_ab_*_session21.json;
# code in commit e077e0d)
# session 22: the same fills, but each program's tiles requested one at a time (gluon_gemv.PACED: at most one tile per
# program in flight, so the latency-bound kernels they overlap queue behind less)
# (first A/B, paced_ab_h200_2026-12-01_session22.json: o paced 1k equal, 2k -1.6%, 8k -0.8% at 1 row, 8 rows +0.5-1.5%;
# gate_up, qkv or all four paced slower)
VARIANTS["paced_off"] = {(gluon_gemv, "PACED"): {}}  # (since session 22 o is paced for one row: base)
VARIANTS["o_paced_rows16"] = {(gluon_gemv, "PACED_ROWS"): 16}  # o paced for 8 rows too
VARIANTS["o_paced"] = {(gluon_gemv, "PACED"): {O: 1}}
VARIANTS["o8b_paced"] = {(gluon_gemv, "PACED"): {O: 1, (4096, 4096): 1}}  # the Qwen3-8B o product too
VARIANTS["o_paced2"] = {(gluon_gemv, "PACED"): {O: 2}}
VARIANTS["gu_paced"] = {(gluon_gemv, "PACED"): {GATE_UP: 1}}
VARIANTS["qkv_paced"] = {(gluon_gemv, "PACED"): {QKV: 1}}
VARIANTS["all_paced"] = {(gluon_gemv, "PACED"): {QKV: 1, O: 1, GATE_UP: 1, DOWN: 1}}
# (session 23: gate_up's first weight columns read into L2 by a kernel on a parallel graph branch forked after qkv,
# "warm_gu*" and held 3-7 us "warm_d*": same tokens, every form slower, 1k replay 2.577 -> 2.647-2.696 ms, 8k 3.19 ->
# 3.44-3.75; l2_warm_*_session23.json; code in 5a294d8, 87c1842, d730b74)
# (session 23: gate_up's or qkv's ring fill held 0.5-2.5 us at its start, "gu_delay*"/"qkv_delay*": slower in
# proportion to the hold, 1k 2.60 -> 2.61-2.68 ms; fill_delay_ab_h200_2026-12-01_session23.json; code in dfaa1b4)
# session 23: the short graph's Gluon split with buffers for one step (48 KB instead of 80, "split1*"; code in 533b648),
# so that more o programs are resident beside it during the chain; o's ring of 3 or 2 stages, or o at split-K 16
# (smem_ab_h200_2026-12-01_session23.json: o_st3 1k replay 2.578/2.582 -> 2.540, 8k 3.186/3.190 -> 3.163, 8 rows
# 2.793 -> 2.799 and 3.541 -> 3.559; split1 equal, but it never engaged: the graphs size the attention for the 40k
# window, see SHORT_SIZED below; o_st2 and o split-K 16 slower). Then for
# a lone row only (gluon_gemv.LONE_ROW_STAGES; lone3_ab_*: 1k 2.607/2.615 -> 2.570/2.576, 2k 2.726/2.723 ->
# 2.736/2.759, 8k 3.225/3.217 -> 3.205/3.214; with split1 no better; o's 3 tiles at once slower): shipped in the
# 1280-key short graph only (engine/graphs.SHORT_BOUNDS)
VARIANTS["o_st3"] = _tiles(gluon={O: (64, 128, 3, 1)})
_LONE3 = {(gluon_gemv, "LONE_ROW_STAGES"): {O: 3}}
VARIANTS["lone3"] = _LONE3
VARIANTS["lone3_unpaced"] = {**_LONE3, (gluon_gemv, "PACED"): {}}
# (staged for session 24) the Gluon-split short graph up to 2048 keys: with the Gluon split at 2k its 256 live
# programs held 20-24 MB of shared memory at 80-96 KB each (slower in session 22); with one-step buffers (48 KB) and o's
# 3-stage ring both might fit. And the Qwen3-8B o product's ring at 3 stages in its 1280-key graph.
_G2K = {"PROGRAMS_ONE_ROW": 32, "GLUON_SPLIT": True, "GLUON_PROGRAMS": 32, "GLUON_BLOCK_LAST": True,
        "gluon_gemv.LONE_ROW_STAGES": {O: 3}}
VARIANTS["short2k_gluon"] = {(graphs, "SHORT_BOUNDS"): ((2048, _G2K), (3072, {}))}
VARIANTS["short2k_gluon1"] = {(graphs, "SHORT_BOUNDS"): ((2048, {**_G2K, "GLUON_ONE_STEP": True}), (3072, {}))}
VARIANTS["short2k_gluon1_o4"] = {(graphs, "SHORT_BOUNDS"): ((2048, {**_G2K, "GLUON_ONE_STEP": True,
                                                                    "gluon_gemv.LONE_ROW_STAGES": {}}), (3072, {}))}
# (staged) the short graphs' attention sized for their bounds, not the 40k window (engine/graphs.SHORT_SIZED): the
# 1280-key graph's Gluon split without its 16-split loop (80 KB, or 48 one-step) and a 2-chunk combine
_SIZED = {(graphs, "SHORT_SIZED"): (1280, 2048, 3072)}
VARIANTS["sized"] = _SIZED
VARIANTS["sized1"] = {**_SIZED, (triton_attention, "GLUON_ONE_STEP"): True}
VARIANTS["sized_2k_gluon"] = {**_SIZED, **VARIANTS["short2k_gluon"]}
VARIANTS["sized_2k_gluon1"] = {**_SIZED, **VARIANTS["short2k_gluon1"]}
VARIANTS["lone3_8b"] = {(graphs, "SHORT_BOUNDS"): tuple(
    (b, {**st, "gluon_gemv.LONE_ROW_STAGES": {O: 3, (4096, 4096): 3}} if "GLUON_SPLIT" in st else st)
    for b, st in graphs.SHORT_BOUNDS)}
# the short graphs without their product settings (o's 4-stage ring: session 22's)
VARIANTS["short_o4"] = {(graphs, "SHORT_BOUNDS"): tuple((b, {k: v for k, v in st.items() if "." not in k})
                                                          for b, st in graphs.SHORT_BOUNDS)}
VARIANTS["sized1_o4"] = {**VARIANTS["sized1"], **VARIANTS["short_o4"]}
# (session 24) sized_ab_*_session24: sized 1k 2.633/2.630 -> 2.580, sized1 2.572/2.577, sized1_o4 2.555; 1.5k
# sized_2k_gluon1 2.674/2.682 -> 2.599; but 2k (the 3072-key graph sized) 2.760/2.757 -> 2.825. So sizing per bound:
_G1280 = {**_G2K, "GLUON_ONE_STEP": True}  # session 23's 1280-key settings (o's ring at 3 stages), one-step
_G2K1 = {**_G2K, "GLUON_ONE_STEP": True}
_NO_O3 = {"gluon_gemv.LONE_ROW_STAGES": {}}


def _short(*entries, sized=()):
    return {(graphs, "SHORT_BOUNDS"): (*entries, (3072, {})), (graphs, "SHORT_SIZED"): sized}


VARIANTS["s1280"] = _short((1280, _G1280), sized=(1280,))
VARIANTS["s1280_o4"] = _short((1280, {**_G1280, **_NO_O3}), sized=(1280,))
VARIANTS["g2k1"] = _short((2048, _G2K1), sized=(2048,))
VARIANTS["g2k1_o4"] = _short((2048, {**_G2K1, **_NO_O3}), sized=(2048,))
VARIANTS["s1280_g2k1"] = _short((1280, _G1280), (2048, _G2K1), sized=(1280, 2048))
VARIANTS["s1280_o4_g2k1"] = _short((1280, {**_G1280, **_NO_O3}), (2048, _G2K1), sized=(1280, 2048))
# (s1280_o4_g2k1 shipped in session 24: engine/graphs.SHORT_BOUNDS) session 23's short graphs, to compare against
VARIANTS["session23"] = _short((1280, {**_G2K, "GLUON_ONE_STEP": False}))
# a third sized Gluon graph up to 2560 keys (o at 3 stages) before the 3072-key Triton one: much slower, 2k
# 2.771/2.759 -> 3.140/3.157 ms/token, 2.3k 3.010/3.003 -> 3.152/3.167 (g2560_ab_h200_2026-12-01_session24.json)
_B = graphs.SHORT_BOUNDS
VARIANTS["g2560"] = {(graphs, "SHORT_BOUNDS"): (*_B[:2], (2560, _B[1][1]), (3072, {})),
                     (graphs, "SHORT_SIZED"): (1280, 2048, 2560)}
# (session 22: a lone row's attention splits reduced by the o product's programs, "combine_in_o*", exact but equal at
# 1k: code in a18bcae and 3573d19, combine_in_o_ab_h200_2026-12-01_session22.json)
VARIANTS["norm_pdl1"] = {(triton_gemm, "PDL_KINDS"): {**triton_gemm.PDL_KINDS, "norm": 1}}
# session 15: the post-o norm and the combine asking for 100-200 KB of shared memory they do not use, so that no
# product program filling its ring shares their SM: no change at 1 row, 8 rows slower (code removed;
# exclusive_sm_ab_h200_2026-11-30_session15.json)
# session 15: the split kernel's page ids for its first step loaded before the PDL wait; a lone decode row's query
# tile 16 on 1 warp or 32 on 2 (same bits as the 64-row tile: one warp per 16 rows keeps each row's layout): all
# slower, removed (split_tile_pages_early_ab_h200_2026-11-30_session15.json; the code is in commit 19132a0)
# session 15: the slices' norm reading its residual (an HBM miss) before its PDL wait: the post-o norm's body took
# 6.8 us after its wait against 3.2 for the post-down one, while gate_up's ring fill floods HBM
VARIANTS["res_early"] = {(triton_fused, "RES_EARLY"): True}  # shipped on since: the same as base now
VARIANTS["res_late"] = {(triton_fused, "RES_EARLY"): False}
# session 15 (staged, not yet run): the target's attention split in Gluon with its keys and values copied to shared
# memory before the PDL wait (ops/gluon_split.py; the Triton kernel's bits by construction, no spills)
VARIANTS["gluon_split"] = {(triton_attention, "GLUON_SPLIT"): True}
# (a form with the query tile as a register operand, gluon_split_qreg, was no faster: gluon_split_ab_* and
# rope3_ab_h200_2026-11-30_session16.json; removed)
# session 16: the q/k norm + RoPE kernel lets the split kernel launch at its start (PDL mode 3), so that the Gluon
# split's key copies run during the qkv product rather than during RoPE alone
_ROPE3 = {(triton_gemm, "PDL_KINDS"): {**triton_gemm.PDL_KINDS, "rope": 3}}
VARIANTS["rope3"] = _ROPE3
VARIANTS["rope3_gluon_split"] = {**_ROPE3, **VARIANTS["gluon_split"]}
for _p in (16, 32, 64):  # the Gluon split's programs per (row block, kv head), each walking its splits in turn
    VARIANTS[f"rope3_gluon_p{_p}"] = {**VARIANTS["rope3_gluon_split"], (triton_attention, "GLUON_PROGRAMS"): _p}
# its grid with the row blocks last (a graph's unused row blocks launch after the live programs); the split kernel
# letting the combine launch right after its wait (PDL mode 2)
VARIANTS["rope3_gluon_last"] = {**VARIANTS["rope3_gluon_p64"], (triton_attention, "GLUON_BLOCK_LAST"): True}
VARIANTS["rope3_gluon_last_s2"] = {**VARIANTS["rope3_gluon_last"],
                                   (triton_gemm, "PDL_KINDS"): {**triton_gemm.PDL_KINDS, "rope": 3, "split": 2}}
# session 18: kernels letting the next one launch at their start (PDL mode 3), so that the o product's weight ring
# fills during the attention split rather than during the combine (which its TMA traffic slowed 4 -> 7 us), and
# gate_up's during the o product's tail
for _name, _kinds in {"s3c3": {"split": 3, "combine": 3}, "c3": {"combine": 3}, "n3": {"norm": 3},
                      "r3s3c3": {"rope": 3, "split": 3, "combine": 3}, "g3n3": {"gluon": 3, "norm": 3},
                      "s3c3n3": {"split": 3, "combine": 3, "norm": 3}, "r3s3": {"rope": 3, "split": 3},
                      "r3c3": {"rope": 3, "combine": 3}, "r3s2c3": {"rope": 3, "split": 2, "combine": 3}}.items():
    VARIANTS[f"early_{_name}"] = {(triton_gemm, "PDL_KINDS"): {**triton_gemm.PDL_KINDS, **_kinds}}
# session 19: the Gluon split with RoPE (and the split, the combine) at mode 3, over contexts 1k-8k: where does a lone
# decode row gain?
for _name, _kinds in {"r3s3c3": {"rope": 3, "split": 3, "combine": 3}, "r3c3": {"rope": 3, "combine": 3}}.items():
    VARIANTS[f"gluon_{_name}"] = {**VARIANTS["gluon_split"],
                                  (triton_gemm, "PDL_KINDS"): {**triton_gemm.PDL_KINDS, **_kinds}}
# session 19: short-context graphs (engine/graphs.SHORT_PDL) off, or for more tiers than the lone row's
VARIANTS["short_off"] = {(graphs, "SHORT_PDL"): {}}
VARIANTS["torch_argmax"] = {(graphs, "ROW_ARGMAX"): False}
VARIANTS["dead_exit"] = {(triton_attention, "SPLIT_DEAD_EXIT"): True}  # split programs with no key end at once
VARIANTS["kv_together"] = {(triton_attention, "SPLIT_KV_TOGETHER"): True}  # a step's values loaded with its keys
VARIANTS["dead_exit_kv"] = {**VARIANTS["dead_exit"], **VARIANTS["kv_together"]}
VARIANTS["combine_preload"] = {(triton_attention, "COMBINE_PRELOAD"): True}  # the combine's chunks loaded at once
VARIANTS["rope_v_early"] = {(triton_fused, "ROPE_V_EARLY"): True}  # RoPE loads a key head's values with its key
VARIANTS["pages_early"] = {(triton_attention, "SPLIT_PAGES_EARLY"): True}  # a split's first page ids before its wait
VARIANTS["chain_loads"] = {**VARIANTS["dead_exit_kv"], **VARIANTS["combine_preload"], **VARIANTS["rope_v_early"]}
# session 20: which of those for the lone row's short graph (1k, 2k), alone and with 32 split programs per kv head
VARIANTS["cp_rve"] = {**VARIANTS["combine_preload"], **VARIANTS["rope_v_early"]}
VARIANTS["cp_rve_off"] = {(triton_attention, "COMBINE_PRELOAD"): False, (triton_fused, "ROPE_V_EARLY"): False}  # (on
# since session 20: the four above equal base now)
VARIANTS["cp_rve_kv"] = {**VARIANTS["cp_rve"], **VARIANTS["kv_together"]}
VARIANTS["cp_rve_dead"] = {**VARIANTS["cp_rve"], **VARIANTS["dead_exit"]}
VARIANTS["chain_p32"] = {**VARIANTS["chain_loads"], (triton_attention, "PROGRAMS_ONE_ROW"): 32}
VARIANTS["cp_rve_p32"] = {**VARIANTS["cp_rve"], (triton_attention, "PROGRAMS_ONE_ROW"): 32}
for _name, _att in {"p16": {"PROGRAMS_ONE_ROW": 16}, "p32": {"PROGRAMS_ONE_ROW": 32},
                    "static3": {"COMBINE_STATIC_CHUNKS": 3},
                    "p32_static3": {"PROGRAMS_ONE_ROW": 32, "COMBINE_STATIC_CHUNKS": 3}}.items():  # the short graph's
    VARIANTS[f"short_{_name}"] = {(graphs, "SHORT_BOUNDS"): ((3072, _att),)}
# session 20: one of the two norms at PDL mode 3 in the short graphs (both: slower in session 19)
VARIANTS["short_nmlp3"] = {(graphs, "SHORT_PDL"): {**graphs.SHORT_PDL, "norm_mlp": 3}}
VARIANTS["short_nmlp1"] = {(graphs, "SHORT_PDL"): {**graphs.SHORT_PDL, "norm_mlp": 1}}  # gate_up launched later
VARIANTS["short_nqkv3"] = {(graphs, "SHORT_PDL"): {**graphs.SHORT_PDL, "norm": 3, "norm_mlp": 2}}  # (norm_mlp: norm's)
# (session 31, staged) the norm before qkv at mode 3, so qkv's ring fills during down, with that fill smaller or paced
# so that the norm's loads wait behind less of it (session 20: mode 3 alone 2.651 against 2.619 ms replay)
VARIANTS["nq3_pre1"] = {**VARIANTS["short_nqkv3"], (gluon_gemv, "PREFETCH"): {QKV: 1}}
VARIANTS["nq3_pre2"] = {**VARIANTS["short_nqkv3"], (gluon_gemv, "PREFETCH"): {QKV: 2}}
VARIANTS["nq3_paced"] = {**VARIANTS["short_nqkv3"], (gluon_gemv, "PACED"): {**gluon_gemv.PACED, QKV: 1}}
VARIANTS["short_one"] = {(graphs, "SHORT_BOUNDS"): ((3072, {}),)}  # session 19's one short graph (64 programs)
VARIANTS["short_triton"] = {(graphs, "SHORT_BOUNDS"): ((1280, {"PROGRAMS_ONE_ROW": 32}), (3072, {}))}  # (session 20)
VARIANTS["short_triton_o_paced"] = {**VARIANTS["short_triton"], **VARIANTS["o_paced"]}
# session 21: the Gluon split (keys copied before its PDL wait; the Triton split's bits) in the lone row's short graphs
# only (session 16: it won for a lone row at 1k with RoPE at mode 3, lost at 8 rows and at 8k)
_G = {"GLUON_SPLIT": True}
VARIANTS["short_gluon"] = {(graphs, "SHORT_BOUNDS"): ((1280, {"PROGRAMS_ONE_ROW": 32, **_G, "GLUON_PROGRAMS": 32}),
                                                      (3072, _G))}
VARIANTS["short_gluon_p64"] = {(graphs, "SHORT_BOUNDS"): ((1280, {"PROGRAMS_ONE_ROW": 32, **_G}), (3072, _G))}
VARIANTS["short_gluon_last"] = {(graphs, "SHORT_BOUNDS"): ((1280, {"PROGRAMS_ONE_ROW": 32, **_G, "GLUON_PROGRAMS": 32,
                                                                   "GLUON_BLOCK_LAST": True}),
                                                           (3072, {**_G, "GLUON_BLOCK_LAST": True}))}
# (session 19: the norms or the o product at mode 3 in the short graph as well: no gain, removed;
# short_graph_more_ab_h200_2026-11-30_session19.json)
VARIANTS["short_t124"] = {(graphs, "SHORT_TIERS"): (1, 2, 4)}
VARIANTS["short_t1248"] = {(graphs, "SHORT_TIERS"): (1, 2, 4, 8)}
# (session 24) 8 rows with the sized graphs, every bound: 8-row replay at 1k 2.796/2.794 -> 2.734/2.740 ms
# (short_t18_ab_h200_2026-12-01_session24.json); shipped up to 1280 keys (graphs.SHORT_TIER_BOUND). t1 without it
VARIANTS["store_direct"] = {(triton_attention, "GLUON_STORE_DIRECT"): True}  # (session 28)
# (session 31: the one-warp Gluon split, "warp1", slower: removed, code in 0a9fa9a, warp1_ab_*_session31.json)
# (session 31: o's first N programs pacing in the 1280-key graph, "pf268"/"pf224"/"pf160": equal or slower, removed;
# code in 08b14ef, pace_first_ab_h200_2026-12-02_session31.json)


def _in_1280(**settings) -> dict:
    """The shipped short graphs with these "module.NAME" settings added to the 1280-key graph's."""
    return {(graphs, "SHORT_BOUNDS"): tuple((b, {**st, **settings} if b == 1280 else st)
                                            for b, st in graphs.SHORT_BOUNDS)}


# (session 32) o's fill before its wait with 2 or 3 tiles per program in flight in the 1280-key graph only: slower, 1k
# decode 2.475/2.468 -> 2.494/2.479 (2) and 2.521/2.524 (3) ms/token (pace23_ab_h200_2026-12-02_session32.json)
VARIANTS["pace2_1280"] = _in_1280(**{"gluon_gemv.PACED": {O: 2}})
VARIANTS["pace3_1280"] = _in_1280(**{"gluon_gemv.PACED": {O: 3}})
# (session 30: the swapped Gluon split, "swap", slower and removed, code in c86fb9e; o_s16 beside it, "swap_o16", and
# alone much slower: o16_ab_h200_2026-12-02_session30.json)
VARIANTS["short_t18"] = {(graphs, "SHORT_TIERS"): (1, 8), (graphs, "SHORT_TIER_BOUND"): {}}
VARIANTS["short_t1"] = {(graphs, "SHORT_TIERS"): (1,)}
# (staged for session 25) the 4B qkv product at split-K 2 (192 programs on all SMs rather than 96: other bits, so list
# qkv_s2 first and the tokens column checks qkv_s2_rope against it), with its slices summed by the RoPE kernel
# (triton_gemm.QKV_SLICES_TO_ROPE) rather than by each tile's last program
VARIANTS["qkv_s2"] = _tiles({QKV: (64, 128, 2, 4, 4)})
VARIANTS["qkv_s2_rope"] = {**VARIANTS["qkv_s2"], (triton_gemm, "QKV_SLICES_TO_ROPE"): True}
VARIANTS["qkv_s2_rope_bk128"] = {**_tiles({QKV: (64, 128, 2, 4, 4)}, {QKV: (64, 128, 4, 1)}),
                                 (triton_gemm, "QKV_SLICES_TO_ROPE"): True}
# (staged for session 25) 8 rows up to the 2048-key graph or every bound; 2 and 4 rows (verifies of 2-4) as 8 rows
VARIANTS["t8_2048"] = {(graphs, "SHORT_TIER_BOUND"): {8: 2048}}
VARIANTS["t8_all"] = {(graphs, "SHORT_TIER_BOUND"): {}}
VARIANTS["t1248"] = {(graphs, "SHORT_TIERS"): (1, 2, 4, 8), (graphs, "SHORT_TIER_BOUND"): {2: 1280, 4: 1280, 8: 1280}}
# (session 25) 2 and 4 rows in the 2048-key graph too (shipped: 1280 keys at most); both RMSNorm kernels with 8 or 16
# warps (triton_fused.NORM_WARPS: other bits, so list norm_w8 first and the tokens column checks the rest against it)
VARIANTS["t24_2048"] = {(graphs, "SHORT_TIER_BOUND"): {8: 2048}}
VARIANTS["norm_w8"] = {(triton_fused, "NORM_WARPS"): 8}
VARIANTS["norm_w16"] = {(triton_fused, "NORM_WARPS"): 16}
# (session 25, shipped in 26) plain decoding's rows moved on by the graph itself (engine/graphs.ADVANCE): decode_ms, not
# the replays, shows it (no metadata copy or fill kernels between the steps' graphs); the tokens read from the graph's
# host ring too (RING_READBACK, no token copy either). Their A/B ran before they were on: base was both off
VARIANTS["advance"] = {(graphs, "ADVANCE"): True, (graphs, "RING_READBACK"): False}
VARIANTS["advance_ring"] = {(graphs, "ADVANCE"): True, (graphs, "RING_READBACK"): True}
VARIANTS["no_advance"] = {(graphs, "ADVANCE"): False, (graphs, "RING_READBACK"): False}  # as before session 26
# session 16: graphs sized for Qwen3's own 40k context window (the engine's default max_model_len) against the bench's
# ctx + 1024; the combine unrolling every chunk of such a grid (64: all, as before) or its first 0-8 (2 shipped)
_MML = {(bench_kernels, "MAX_MODEL_LEN"): 40960}  # (since session 16 also what every variant gets by default)
VARIANTS["window_ctx"] = {(bench_kernels, "MAX_MODEL_LEN"): 0}  # the window before session 16: ctx + 1024
for _c in (0, 1, 2, 4, 8, 64):
    VARIANTS[f"static{_c}"] = {(triton_attention, "COMBINE_STATIC_CHUNKS"): _c}
    VARIANTS[f"mml40k_static{_c}"] = {**_MML, (triton_attention, "COMBINE_STATIC_CHUNKS"): _c}
VARIANTS["combine_while"] = {(triton_attention, "COMBINE_WHILE"): True}  # the rest in a while loop (shipped since)
VARIANTS["combine_for"] = {(triton_attention, "COMBINE_WHILE"): False}
# (session 17: the split's hoisted loads, "split_hoist", were slower and are removed)
# (session 19: products asking L2 for a later product's weight tiles, "l2_*", were slower and are removed; the code is
# in commit 7af1146, l2_handoff_ab_h200_2026-11-30_session19.json. Session 20: the o product asking for gate_up's
# before its PDL wait, during the attention chain, slower too: commit 790a889, l2_pre_wait_ab_*_session20.json;
# session 21: and with the prefetched lines marked evict_last: commit ad215ec, l2_last_ab_*_session21.json)
# (session 33) the target's o, gate_up and down weights stored tile by tile (gluon_gemv.TILED_SHAPES, shipped: 1k decode
# -1%, tiled_mlp_ab_h200_2026-12-02_session33.json) against row-major, and with qkv tiled too (slower there:
# tiled_only_ab_*). The session's other layouts (every tile row after row: "tiled1_*") ran as copies beside the
# row-major weights (code in b259369)
VARIANTS["untiled"] = {(gluon_gemv, "TILED_SHAPES"): set()}
VARIANTS["tiled_qkv"] = {(gluon_gemv, "TILED_SHAPES"): gluon_gemv.TILED_SHAPES | {QKV}}
VARIANTS["tiled_draft"] = {(gluon_gemv, "TILED_DRAFTER"): True}  # the drafter's layers too (on since session 34)
VARIANTS["untiled_draft"] = {(gluon_gemv, "TILED_DRAFTER"): False}
# (staged in session 33) the MLP's Gluon tiles retuned for the tiled layout (chosen in session 9 on row-major weights;
# a tile's bits do not depend on BK or the ring): gate_up in 32 KB tiles or a deeper ring, down's ring shallower or
# deeper (its BK stays 128: 256 does not divide its split-K slices)
for _name, _cfg in {"gu256": {GATE_UP: (64, 256, 3, 1)}, "gu_st6": {GATE_UP: (64, 128, 6, 1)},
                    "dn_st4": {DOWN: (64, 128, 4, 1)}, "dn_st8": {DOWN: (64, 128, 8, 1)}}.items():
    VARIANTS[f"tiled_{_name}"] = _tiles(gluon=_cfg)
# (staged in session 33) qkv in 64 x 128 tiles (16 KB, 4 stages), row-major and tiled: whether tiled qkv's loss is
# its 32 KB tiles'
VARIANTS["qkv128"] = _tiles(gluon={QKV: (64, 128, 4, 1)})
VARIANTS["tiled_qkv128"] = {**VARIANTS["qkv128"], (gluon_gemv, "TILED_SHAPES"): gluon_gemv.TILED_SHAPES | {QKV}}
# (staged in session 33) the Qwen3-8B o, gate_up and down tiled too (by role, as the 4B's)
VARIANTS["tiled_8b"] = {(gluon_gemv, "TILED_SHAPES"): gluon_gemv.TILED_SHAPES | {(4096, 4096), (24576, 4096),
                                                                                 (4096, 12288)}}
# (session 36: the 4B o product register-fed, "regfed_o": its weight in wgmma fragment order, each program's whole
# slice in registers before its wait; same tokens, 1k decode 2.512/2.502 -> 2.578/2.574 ms/token, 8-row replay
# 2.725/2.705 -> 2.802/2.797; regfed_o_ab_h200_2026-12-02_session36.json; removed, code in 2bf1fb7)
# (session 36: o's paced fill in 8 KB tiles, BK 64 in 8 stages, paced at 1 (2.5 MB in flight, not 5) or 2: same tokens,
# slower, 1k decode 2.493/2.477 -> 2.554/2.561 and 2.508 ms/token; o_bk64_ab_h200_2026-12-02_session36.json)
# (session 37: the RMSNorms at PDL mode 5, nmlp5 / n5 / nqkv5: slower or equal, removed; norm_pdl5_ab_*_session37.json)
# (staged in session 38) the small kernels of the chain at fewer warps: the RMSNorms (both kernels: they share the sum
# of squares' order), the q/k norm + RoPE kernel, the attention combine; each count gives other bits than 4 warps (the
# tokens column checks them against the first variant listed), but every row's bits stay its own
for _w in (1, 2):
    VARIANTS[f"norm_w{_w}"] = {(triton_fused, "NORM_WARPS"): _w}
    VARIANTS[f"rope_w{_w}"] = {(triton_fused, "ROPE_WARPS"): _w}
    VARIANTS[f"comb_w{_w}"] = {(triton_attention, "COMBINE_WARPS"): _w}
    VARIANTS[f"small_w{_w}"] = {(triton_fused, "NORM_WARPS"): _w, (triton_fused, "ROPE_WARPS"): _w,
                               (triton_attention, "COMBINE_WARPS"): _w}
VARIANTS["rope_comb_w2"] = {(triton_fused, "ROPE_WARPS"): 2, (triton_attention, "COMBINE_WARPS"): 2}
# (staged in session 38) x loaded once after the wait (XRING 0) rather than riding in the ring beside the weights, for
# o (no more shared memory: its 4 K steps are its ring), qkv and down (more shared memory); same bits
VARIANTS["xr0_o"] = _tiles(gluon={O: (64, 128, 4, 0)})
VARIANTS["xr0_qkv"] = _tiles(gluon={QKV: (64, 256, 3, 0)})
VARIANTS["xr0_down"] = _tiles(gluon={DOWN: (64, 128, 6, 0)})
# (staged in session 38) gate_up's and qkv's pre-wait fills paced at 2 or 3 tiles per program in flight (session 22
# paced them at 1, slower: too few bytes in flight), o paced at 1 as shipped: the norm before each product loads its
# slices while the fill runs (norm after o: 6.5 us after its release, session 36's timeline), so a shorter queue may
# let it end sooner while HBM stays busy
for _p in (2, 3):
    VARIANTS[f"gu_pace{_p}"] = {(gluon_gemv, "PACED"): {**gluon_gemv.PACED, GATE_UP: _p}}
    VARIANTS[f"qkv_pace{_p}"] = {(gluon_gemv, "PACED"): {**gluon_gemv.PACED, QKV: _p}}
VARIANTS["gu_qkv_pace2"] = {(gluon_gemv, "PACED"): {**gluon_gemv.PACED, GATE_UP: 2, QKV: 2}}
# (staged in session 38) the next product's programs launched near the end of the product before the norm, not at its
# end: the down (or o) product lets the norm after it launch once each of its programs asked for its last weight tile
# (mode 6) or after its loop (1), and that norm lets the next product launch at its own start (3), so the next ring
# fills during the product's tail. (Session 31's norm before qkv at 3 with down at 2 launched qkv during all of down.)
def _kinds(**kinds) -> dict:
    return {(triton_gemm, "PDL_KINDS"): {**triton_gemm.PDL_KINDS, "norm_mlp": triton_gemm.pdl_mode("norm_mlp"),
                                         **kinds}}


VARIANTS["d6_n3"] = _kinds(gluon_down=6, norm=3)
VARIANTS["d1_n3"] = _kinds(gluon_down=1, norm=3)
VARIANTS["o1_nm3"] = _kinds(gluon_o=1, norm_mlp=3)
VARIANTS["d6_n3_o1_nm3"] = _kinds(gluon_down=6, norm=3, gluon_o=1, norm_mlp=3)
VARIANTS["d6"] = _kinds(gluon_down=6)
# ... in the one-row short graphs only (graphs.SHORT_PDL_ONE_ROW): o1_nm3 made 8-row replay 3.4% slower
VARIANTS["one_d6"] = {(graphs, "SHORT_PDL_ONE_ROW"): {"gluon_down": 6}}
VARIANTS["one_o1_nm3"] = {(graphs, "SHORT_PDL_ONE_ROW"): {"gluon_o": 1, "norm_mlp": 3}}
VARIANTS["one_d6_o1_nm3"] = {(graphs, "SHORT_PDL_ONE_ROW"): {"gluon_down": 6, "gluon_o": 1, "norm_mlp": 3}}
# (staged in session 38 for the next) on top of the shipped one-row modes: gate_up lets down launch once its programs
# asked for their last tile (6) or after its loop (1); the one-row modes for 2 and 4 rows too; the combine at 1 or 2
# warps (session 38's comb_* variants ran before COMBINE_WARPS reached the launch: base runs)
_ONE = graphs.SHORT_PDL_ONE_ROW
VARIANTS["one_gu6"] = {(graphs, "SHORT_PDL_ONE_ROW"): {**_ONE, "gluon_gate_up": 6}}
VARIANTS["one_gu1"] = {(graphs, "SHORT_PDL_ONE_ROW"): {**_ONE, "gluon_gate_up": 1}}
VARIANTS["one_124"] = {(graphs, "SHORT_PDL_ONE_ROW_TIERS"): (1, 2, 4)}
VARIANTS["one_12"] = {(graphs, "SHORT_PDL_ONE_ROW_TIERS"): (1, 2)}  # (session 39) one_124 helped 2 rows, not 4
VARIANTS["comb_w2_one_12"] = {**VARIANTS["comb_w2"], **VARIANTS["one_12"]}
VARIANTS["one_qkv6"] = {(graphs, "SHORT_PDL_ONE_ROW"): {**_ONE, "gluon_qkv": 6}}  # RoPE and the split launched later
# (session 39, staged) the combine reducing 32 splits at a time, not 16 (other bits): a lone row's short graph (32
# split programs per kv head) then reduces one chunk, not two, with one maximum and one sum fewer on its path
VARIANTS["comb_c32"] = {(triton_attention, "CHUNK"): 32}
VARIANTS["comb_w2_c32"] = {**VARIANTS["comb_w2"], **VARIANTS["comb_c32"]}
PROPOSE_ONLY = os.environ.get("AB_PROPOSE_ONLY") == "1"
PLAIN_ONLY = os.environ.get("AB_PLAIN_ONLY") == "1"
ROWS = [int(r) for r in os.environ.get("AB_ROWS", "1,8").split(",")]  # the plain engine's replayed row counts


def run_variant(models, ctx: int, overrides: dict) -> dict:
    with patched(overrides):
        res = {}
        for spec in (True,) if PROPOSE_ONLY else (False,) if PLAIN_ONLY else (False, True):
            eng = make_engine(models, ctx, spec=spec)
            seq = prefill(eng, ctx, 200)
            if spec:  # the propose graph (greedy drafts)
                res.update(propose_ms=propose_time(eng, seq), propose_replay_ms=propose_replay_ms(eng, seq),
                           spec_verify1_replay_ms=graph_replay_ms(eng, seq), spec_verify8_replay_ms=graph_replay_ms(
                               eng, seq, 8))
            else:
                res.update(window=eng.max_model_len, decode_ms=decode_ms(eng, seq, 64))
                res["tokens"] = hash(tuple(seq.output_ids))  # the decoded tokens: every exact variant's are the same
                res.update({f"replay{r}_ms": graph_replay_ms(eng, seq, r) for r in ROWS})
            del eng, seq
            gc.collect()
            torch.cuda.empty_cache()
        return res


def main() -> None:
    out = sys.argv[1]
    shape = sys.argv[2] if len(sys.argv) > 2 else "qwen3-4b"
    names = sys.argv[3:] or list(VARIANTS)
    bw = copy_bandwidth()
    models = random_models(shape)
    floor_ms = param_bytes(models[0]) / bw * 1e3
    results = {"shape": shape, "copy_bandwidth": bw, "weights_floor_ms": floor_ms, "runs": {}}
    for ctx in [int(c) for c in os.environ.get("AB_CONTEXTS", "1024,8192").split(",")]:
        first = None
        for name in names:
            r = run_variant(models, ctx, VARIANTS[name.split("#")[0]])
            if "tokens" in r:  # the plain engine's tokens against the first variant's (same weights, same prompt)
                first = r["tokens"] if first is None else first
                r["tokens"] = float(r["tokens"] == first)
            results["runs"][f"{name}@{ctx}"] = r
            print(f"{name:>18} ctx {ctx}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
            with open(out, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
