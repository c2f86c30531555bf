"""The attention chain's Triton kernels compile for sm_90 on a machine without a GPU with their staged switches on,
and the load schedules do what they are for (PTX): COMBINE_PRELOAD issues both unrolled chunks' value loads before
the first barrier, SPLIT_KV_TOGETHER a step's key and value loads before it, and stamps read %globaltimer. The GPU
tests (tests/test_gpu.py) check their tokens; tests/test_ops.py their results in the interpreter."""
from __future__ import annotations

import inspect

import pytest

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(not triton.__version__.startswith("3.6"), reason="PTX checked with triton 3.6")


def compiled(kernel, types: dict, consts: dict, divisible: tuple[str, ...], **options):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(inspect.signature(kernel.fn).parameters)
    sig = {**types, **{name: "constexpr" for name in consts}}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n.endswith("_ptr") or n in divisible}
    src = ASTSource(kernel, sig, consts, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, **options))


def ptx_of(kernel, types: dict, consts: dict, divisible: tuple[str, ...]) -> str:
    return compiled(kernel, types, consts, divisible).asm["ptx"]


def loads_before_first_barrier(ptx: str, after: str) -> int:
    """Vector global loads between the first line containing `after` and the next bar.sync."""
    body = ptx[ptx.index(after):]
    return body[:body.index("bar.sync")].count("ld.global.v4")


def split_kernel(options: dict | None = None, **switches):
    from sparkdec.ops import triton_attention as ta

    ints = ["stride_qt", "stride_qh", "stride_ks", "stride_kh", "stride_bt", "page_size", "num_splits", "num_heads",
            "num_rows"]
    types = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "bt_ptr": "*i64", "seq_ptr": "*i64",
             "len_ptr": "*i32", "lead_ptr": "*i64", "nrow_ptr": "*i64", "acc_ptr": "*fp32", "ml_ptr": "*fp32",
             "scale": "fp32", **{n: "i32" for n in ints}, "stamp_ptr": "*i64"}
    consts = dict(GROUP=4, GROUP_PAD=4, ROWS=16, PASSES=1, D=128, D_PAD=128, SPLIT_N=128, FINE_N=64, FINE_SPLITS=32,
                  BLOCK=64, PROGRAMS=64, ITERS=8, PDL=3, DEAD_EXIT=0, KV_TOGETHER=0, PAGES_EARLY=0, STAMPS=0)
    consts.update(switches)
    return compiled(ta._split_kernel, types, consts, ("stride_qt", "stride_qh", "stride_ks", "stride_kh", "page_size"),
                    **(options or {}))


def split_ptx(**switches) -> str:
    return split_kernel(**switches).asm["ptx"]


def combine_ptx(**switches) -> str:
    from sparkdec.ops import triton_attention as ta

    types = {"acc_ptr": "*fp32", "ml_ptr": "*fp32", "len_ptr": "*i32", "out_ptr": "*bf16", "stride_ot": "i32",
             "stride_oh": "i32", "num_heads": "i32", "num_splits": "i32", "stamp_ptr": "*i64"}
    consts = dict(SPLIT_N=128, FINE_N=64, FINE_SPLITS=32, CHUNK=16, CHUNKS=32, D=128, D_PAD=128, STATIC=2, WHILE=True,
                  PRELOAD=0, PDL=3, STAMPS=0)
    consts.update(switches)
    return ptx_of(ta._combine_kernel, types, consts, ("stride_ot", "stride_oh"))


def test_combine_preload_issues_both_chunks_values_before_its_first_barrier():
    assert loads_before_first_barrier(combine_ptx(), "griddepcontrol.wait") == 4  # chunk 0's values only
    assert loads_before_first_barrier(combine_ptx(PRELOAD=1), "griddepcontrol.wait") == 8


def test_split_kv_together_issues_keys_and_values_before_the_step_is_staged():
    loop = "%.preheader"  # the split steps' loop
    assert loads_before_first_barrier(split_ptx(), loop) == 8  # the keys' loads only
    assert loads_before_first_barrier(split_ptx(KV_TOGETHER=1), loop) == 16


def test_split_pages_early_loads_the_first_steps_page_ids_before_the_wait():
    def loads_before_wait(ptx):
        return ptx[:ptx.index("griddepcontrol.wait")].count("ld.global")

    assert loads_before_wait(split_ptx(PAGES_EARLY=1)) > loads_before_wait(split_ptx()) == 3  # + lengths and pages


def test_stamps_and_dead_exit_compile_and_stamps_cost_nothing_off():
    assert split_ptx(DEAD_EXIT=1, STAMPS=1).count("%globaltimer") >= 3 + 4  # (+ the body's, once per unrolled step)
    assert "globaltimer" not in split_ptx(DEAD_EXIT=1)
    assert combine_ptx(PRELOAD=1, STAMPS=1).count("%globaltimer") == 3


def rope_ptx(**switches) -> str:
    from sparkdec.ops import triton_fused as tf

    ints = ["stride_t", "stride_qt", "stride_qh", "stride_cs", "stride_ch", "stride_cos", "q_cols", "tiles"]
    types = {"qkv_ptr": "*bf16", "qw_ptr": "*bf16", "kw_ptr": "*bf16", "cos_ptr": "*fp32", "sin_ptr": "*fp32",
             "pos_ptr": "*i64", "slot_ptr": "*i64", "q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16",
             "eps": "fp32", **{n: "i32" for n in ints}, "ws_ptr": "*fp32", "stamp_ptr": "*i64"}
    consts = dict(NUM_Q=32, NUM_KV=8, HALF=64, PDL=2, V_EARLY=0, STAMPS=0, SLICES=0, BN=1, MP=1)
    consts.update(switches)
    return ptx_of(tf._qkv_rope_store_kernel, types, consts, tuple(ints))


def test_rope_reading_the_qkv_products_slices_compiles():
    """triton_gemm.QKV_SLICES_TO_ROPE (staged): the kernel summing qkv's split-K slices compiles, two loads per
    element where the tensor's form has one."""
    plain, sliced = rope_ptx(V_EARLY=1), rope_ptx(V_EARLY=1, SLICES=2, BN=64, MP=8)
    assert "griddepcontrol.wait" in sliced and sliced.count("ld.global") > plain.count("ld.global")


def test_rope_v_early_loads_the_values_before_the_norms_reductions():
    def loads_after_wait_before_barrier(ptx):
        body = ptx[ptx.index("griddepcontrol.wait"):]
        return body[:body.index("bar.sync")].count("ld.global")

    assert loads_after_wait_before_barrier(rope_ptx()) == 2  # the query/key halves
    assert loads_after_wait_before_barrier(rope_ptx(V_EARLY=1)) == 4  # and the value halves


@pytest.mark.parametrize("cap", [168, 128])
def test_split_register_cap_fits_more_programs_per_sm_with_the_same_operations(cap):
    """SPLIT_MAXNREG: the capped split kernel uses at most cap registers per thread (three or four 128-thread programs
    per SM against two uncapped), and its PTX is the uncapped kernel's but for the .maxnreg directive: the cap acts in
    ptxas's register allocation, which spills rather than changes an operation (the GPU test checks the bits)."""
    from cubin_usage import resource_usage

    free, capped = split_kernel(PDL=1), split_kernel({"maxnreg": cap}, PDL=1)
    assert resource_usage(free.asm["cubin"])["REG"] > 168 >= cap >= resource_usage(capped.asm["cubin"])["REG"]
    lines = [x for x in capped.asm["ptx"].splitlines() if ".maxnreg" not in x]
    assert lines == free.asm["ptx"].splitlines() and ".maxnreg" in capped.asm["ptx"]


def test_the_argmax_pick_kernel_compiles_with_and_without_moving_rows_on():
    """ops/triton_argmax's pick kernel for sm_90 with ADVANCE (engine/graphs.ADVANCE, on by default), with its host ring
    (RING_READBACK) and without either; the interpreter check (tests/triton_checks.check_argmax_advance) tests what it writes."""
    from sparkdec.ops import triton_argmax as ta

    types = {"val_ptr": "*fp32", "idx_ptr": "*i32", "out_ptr": "*i64", "n": "i32", "chunks": "i32",
             **{f"{n}_ptr": "*i64" for n in ("on", "ids", "pos", "slot", "len", "seq", "tab", "ring")},
             "stride_tab": "i32", "pages": "i32", "page_size": "i32", "stride_ring": "i32", "ring_slots": "i32"}
    for advance, ring in ((0, 0), (1, 0), (1, 1)):
        consts = dict(CHUNKS=64, ADVANCE=advance, RING=ring, PDL=1)
        ptx = compiled(ta._pick_kernel, types, consts, ()).asm["ptx"]
        assert ptx.count("st.global") >= 1 + 4 * advance + 2 * ring, (advance, ring)


def test_the_chain_staging_kernel_compiles_and_never_specializes_on_its_arguments():
    """ops/triton_chain's staging kernel for sm_90, greedy and simulated; none of its arguments, which change from
    round to round, is specialized on its value or alignment (a new specialization compiles mid-request)."""
    from sparkdec.ops import triton_chain as tc

    kernel = tc._stage_kernel
    assert all(p.do_not_specialize and p.do_not_specialize_on_alignment for p in kernel.params if not p.is_constexpr)
    ints = ("n_first", "stride_d", "stride_t", "pages", "n", "page_size", "trash_slot", "simulate_al")
    types = {**{name: "*i64" for name in tc._ARGS if name.endswith("_ptr")}, **{name: "i32" for name in ints}}
    for simulate in (False, True):
        ptx = compiled(kernel, types, dict(GAMMA=7, BLOCK=8, SIMULATE=simulate), ()).asm["ptx"]
        assert ptx.count("st.global") >= 4, simulate
