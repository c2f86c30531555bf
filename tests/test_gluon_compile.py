"""The Gluon product (ops/gluon_gemv.py) compiles for sm_90 on a machine without a GPU: TMA loads, wgmma, no spills.

The device tests (tests/test_gpu.py) check its bits; this catches a broken kernel in CPU CI. The Gluon path targets
triton 3.6 (the H200 image's); other versions skip.
"""
from __future__ import annotations

import pytest
from cubin_usage import resource_usage

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not triton.__version__.startswith("3.6"), reason="the Gluon path targets triton 3.6")


def compile_gemv(bn=64, bk=128, stages=4, mp=8, k=2560, split=1, silu=False, residual=False, pdl=2, xring=1,
                 pre=None, defer=False, pace=0, tiled=False):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from sparkdec.ops import gluon_gemv as gg

    wl = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
    xl = gl.NVMMASharedLayout.get_default_for([mp, bk], gl.bfloat16)
    ints = ["M", "N", "stride_xm", "stride_om", "stride_rm"]
    consts = {"K": k, "SILU": silu, "RESIDUAL": residual, "PDL": pdl, "SPLIT_K": split, "STAGES": stages,
              "PRE": stages if pre is None else pre, "MP": mp,
              "XRING": bool(xring), "DEFER": defer, "PACE": pace, "TILED": tiled, "num_warps": 4}
    sig = {"w_desc": f"tensordesc<bf16[{bn},{bk}],{wl!r}>", "x_desc": f"tensordesc<bf16[{mp},{bk}],{xl!r}>",
           "x_ptr": "*bf16", "out_ptr": "*bf16", "res_ptr": "*bf16", "ws_ptr": "*fp32", "cnt_ptr": "*i32",
           **{name: "i32" for name in ints}, **{name: "constexpr" for name in consts}}
    src = GluonASTSource(gg._gemv_kernel, sig, consts)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def local_bytes(cubin: bytes) -> int:
    """Spilled bytes per thread (ptxas spills to the stack; LOCAL counts local arrays), from cuobjdump."""
    usage = resource_usage(cubin)
    return usage["STACK"] + usage["LOCAL"]


@pytest.mark.parametrize("variant", [
    dict(),                                            # qkv-like: split 1, x in the ring
    dict(bk=256, stages=3, silu=True),                 # gate_up: SiLU epilogue
    dict(k=4096, split=8, residual=True),              # o: split-K, ordered finish, residual
    dict(k=9728, split=4, stages=6, residual=True, mp=16),
    dict(bk=256, stages=3, xring=0),                   # the whole x slice loaded once
    dict(k=4096, split=8, residual=True, pre=1),       # one weight tile before the wait, the rest after it
    dict(k=9728, split=4, stages=6, residual=True, defer=True),  # slices left for the norm kernel to sum
    dict(k=4096, split=8, residual=True, defer=True, pdl=3),     # the next kernel launched at the start (mode 3)
    dict(k=4096, split=8, residual=True, defer=True, pace=1),  # o: its fill before the wait one tile at a time
    dict(k=4096, split=8, residual=True, defer=True, pace=2),  # two at a time
    dict(bk=256, stages=3, xring=0, pace=1),           # paced, x loaded once (one arrival per stage)
    dict(stages=4, pre=2, pace=1),                     # paced, two stages before the wait
    dict(k=1024, stages=6, pace=1),                    # paced, a ring deeper than the program's tiles
    dict(bk=256, stages=3, split=2, defer=True),       # qkv at split-K 2, slices left for RoPE (no residual)
    dict(k=9728, split=4, stages=6, residual=True, defer=True, tiled=True),  # weights stored tile by tile
    dict(k=4096, split=8, residual=True, defer=True, pace=1, tiled=True),    # tile by tile, paced
    dict(k=9728, split=4, stages=6, residual=True, defer=True, tiled=True, pdl=6),  # next launch at the last request
    dict(k=4096, split=8, residual=True, defer=True, pace=1, tiled=True, pdl=6),    # ... where that is the wait
    dict(k=9728, split=4, stages=6, residual=True, defer=True, tiled=True, pdl=1),  # next launch after the loop
    dict(bk=256, stages=3, xring=0, pdl=6),            # mode 6 with x loaded once
    dict(k=4096, split=8, stages=3, residual=True, defer=True, pace=1, pdl=6),  # paced, more tiles than the ring
])
def test_gluon_product_compiles_for_sm90(variant):
    kernel = compile_gemv(**variant)
    ptx = kernel.asm["ptx"]
    assert "wgmma.mma_async.sync.aligned.m64n" in ptx
    assert "cp.async.bulk.tensor" in ptx
    assert "griddepcontrol.wait" in ptx
    assert ("atom.global" in ptx) == (variant.get("split", 1) > 1 and not variant.get("defer"))
    assert local_bytes(kernel.asm["cubin"]) == 0
    assert ptx.count("griddepcontrol.launch_dependents") == 1  # every mode lets the next kernel launch at one place
    if variant.get("pdl", 2) in (1, 2, 6):  # ... and these only after the wait
        assert ptx.index("griddepcontrol.wait") < ptx.index("griddepcontrol.launch_dependents")


def compile_mlp(mp=8, pdl=2, split=4, hid=2560, inter=9728, stages=None):
    """ops/gluon_mlp.py's persistent gate_up -> down kernel for sm_90 (Qwen3-4B shapes)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from sparkdec.ops import gluon_mlp as gm

    wl = gl.NVMMASharedLayout.get_default_for([gm.BN, gm.BK], gl.bfloat16)
    consts = {"HID": hid, "INTER": inter, "SPLIT_K": split, "STAGES": stages or gm.STAGES, "MP": mp, "PDL": pdl,
              "num_warps": 4}
    ptrs = ["x_ptr", "inter_ptr", "out_ptr", "res_ptr"]
    counters = ["tile_cnt_ptr", "chunk_cnt_ptr", "done_ptr"]
    ints = ["M", "stride_xm", "stride_im", "stride_om", "stride_rm"]
    desc = f"tensordesc<bf16[{gm.BN},{gm.BK}],{wl!r}>"
    sig = {"wg_desc": desc, "wd_desc": desc, **{n: "*bf16" for n in ptrs}, "ws_ptr": "*fp32",
           **{n: "*i32" for n in counters}, **{n: "i32" for n in ints}, **{n: "constexpr" for n in consts}}
    names = gm._mlp_kernel.arg_names
    # what a launch specializes: pointers 16-byte aligned, row strides multiples of 16 (supports() requires it)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ptrs + ["ws_ptr", "stride_xm", "stride_im"]}
    return triton.compile(GluonASTSource(gm._mlp_kernel, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=4))


@pytest.mark.parametrize("mp,stages", [(8, None), (16, None), (8, 8)])
def test_persistent_mlp_compiles_for_sm90_and_its_grid_is_resident(mp, stages):
    """The staged persistent MLP (ops/gluon_mlp.py): TMA ring, wgmma, PDL wait, release/acquire counters, no spills;
    and the shared memory the grid size assumes bounds what ptxas allocates (every CTA resident: the down tasks
    spin on counters that gate_up tiles of other CTAs bump)."""
    from sparkdec.ops import gluon_mlp as gm

    kernel = compile_mlp(mp=mp, stages=stages)
    ptx = kernel.asm["ptx"]
    for op in ("wgmma.mma_async.sync.aligned.m64n", "cp.async.bulk.tensor", "griddepcontrol.wait",
               "atom.global.gpu.release.add", "atom.global.gpu.acquire.add"):
        assert op in ptx, op
    assert local_bytes(kernel.asm["cubin"]) == 0
    bound = gm.smem_bound(mp, 2560, stages)
    assert kernel.metadata.shared <= bound
    per_sm = max(1, min(gm.CTAS_PER_SM, gm.SMEM_PER_SM // bound))
    assert per_sm * (kernel.metadata.shared + 1024) <= 228 * 1024


def compile_split(pdl=1, iters=4, block_last=False, steps=2, store_direct=False):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from sparkdec.ops import gluon_split as gs

    consts = {"GROUP": 4, "GROUP_PAD": 4, "SPLIT_N": 128, "FINE_N": 64, "FINE_SPLITS": 32, "PDL": pdl,
              "PROGRAMS": 32, "ITERS": iters, "BLOCK_LAST": block_last, "STEPS": steps,
              "STORE_DIRECT": store_direct}
    ptrs = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "bt_ptr": "*i64", "seq_ptr": "*i32",
            "len_ptr": "*i32", "lead_ptr": "*i32", "nrow_ptr": "*i32", "acc_ptr": "*fp32", "ml_ptr": "*fp32",
            "first_ptr": "*i64"}
    ints = ["stride_qt", "stride_qh", "stride_ks", "stride_kh", "stride_bt", "page_size", "num_splits", "num_heads",
            "num_rows"]
    sig = {**ptrs, "scale": "fp32", **{n: "i32" for n in ints}, **{n: "constexpr" for n in consts}}
    # what a launch specialises: 16-aligned pointers and the cache strides (multiples of 16)
    names = list(sig)
    aligned = ["q_ptr", "k_ptr", "v_ptr", "bt_ptr", "acc_ptr", "ml_ptr", "stride_qt", "stride_qh", "stride_ks",
               "stride_kh"]
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = GluonASTSource(gs._gluon_split_kernel, sig, consts, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


@pytest.mark.parametrize("pdl,iters,block_last,steps", [(1, 4, False, 2), (2, 1, True, 2), (3, 1, False, 2),
                                                        (3, 1, True, 1), (1, 4, False, 1)])
def test_gluon_split_kernel_compiles_for_sm90(pdl, iters, block_last, steps):
    """The Gluon attention split (ops/gluon_split.py): cp.async copies before the wait, two wgmma shapes, no spills
    but a few bytes in the loop form, two programs per SM (227 KB); iters > 1: the loop over a program's later splits
    (what a graph sized for a long window launches); steps 1 (GLUON_ONE_STEP): 48 KB in the short graph's form."""
    kernel = compile_split(pdl, iters, block_last, steps)
    assert local_bytes(kernel.asm["cubin"]) <= (0 if iters == 1 else 40)  # (session 21: 40 bytes of stack at iters 4)
    assert kernel.metadata.shared * 2 <= 227 * 1024
    assert steps == 2 or iters > 1 or kernel.metadata.shared <= 48 * 1024
    ptx = kernel.asm["ptx"]
    assert "cp.async" in ptx and "griddepcontrol.wait" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in ptx


def test_gluon_split_store_direct_skips_the_layout_round_trip():
    """GLUON_STORE_DIRECT: the partials stored from the accumulator's registers, with fewer barriers and shared memory
    accesses than the store after a layout conversion, and still no spills (GPU bits: tests/test_gpu.py)."""
    converted, direct = (compile_split(3, 1, True, 1, sd) for sd in (False, True))
    assert local_bytes(direct.asm["cubin"]) == 0
    assert direct.asm["ptx"].count("bar.sync") < converted.asm["ptx"].count("bar.sync")
    assert direct.asm["ptx"].count("ld.shared") < converted.asm["ptx"].count("ld.shared")

