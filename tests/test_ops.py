"""Ops: every fast or padded path equals its reference row by row."""
from __future__ import annotations

import torch

from sparkdec.ops.linear import linear


def test_linear_rows_do_not_depend_on_batch_size():
    torch.manual_seed(0)
    for k, n in [(64, 509), (96, 160), (384, 1024), (1024, 384)]:
        w, x = torch.randn(n, k), torch.randn(130, k)
        ref = torch.stack([linear(x[i:i + 1], w)[0] for i in range(130)])
        for m in list(range(1, 40)) + [63, 64, 65, 127, 130]:
            assert torch.equal(linear(x[:m], w), ref[:m]), (k, n, m)
        assert torch.allclose(ref, x @ w.T, rtol=1e-5, atol=1e-5)


TRITON_CHECK = """
import torch
from sparkdec.engine.context import build_context
from sparkdec.ops.attention import paged_attention
from sparkdec.ops.triton_attention import triton_paged_attention

torch.manual_seed(0)
hq, hkv, d, ps = 8, 2, 24, 16
kc, vc = torch.randn(200 * ps, hkv, d), torch.randn(200 * ps, hkv, d)
rows = [(list(range(0, 40)), list(range(300, 305)), False), (list(range(40, 64)), list(range(100, 104)), True),
        (list(range(0, 40)), [3], False), (list(range(64, 200)), [2100, 2101], False)]
ctx = build_context(rows, ps, "cpu")
q = torch.randn(ctx.num_tokens, hq, d)
ref = paged_attention(q, kc, vc, ctx, d ** -0.5)
out = triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, 2200, d ** -0.5)
assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), (out - ref).abs().max()
blocks = (ctx.block_lead, ctx.block_rows)
assert ctx.blocks_host == [(0, 5), (5, 4), (9, 1), (10, 2)]
grouped = triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, 2200, d ** -0.5,
                                 blocks=blocks)
# rows sharing key/value loads (the bits are checked on the GPU, tests/test_gpu.py: the interpreter's numpy
# products round differently per matrix shape)
assert torch.allclose(grouped, out, atol=1e-6, rtol=1e-6)
long = build_context([(list(range(0, 40)), list(range(7, 47)), False)], ps, "cpu")  # 40 rows: blocks 16, 16, 8
assert long.blocks_host == [(0, 16), (16, 16), (32, 8)]
ql = torch.randn(40, hq, d)
lref = paged_attention(ql, kc, vc, long, d ** -0.5)
largs = (ql, kc, vc, long.block_tables, long.row_seq, long.row_kv_len, ps, 47, d ** -0.5)
lout = triton_paged_attention(*largs, blocks=(long.block_lead, long.block_rows))
assert torch.allclose(lout, lref, atol=1e-5, rtol=1e-5)
assert torch.allclose(lout, triton_paged_attention(*largs), atol=1e-6, rtol=1e-6)
# a graph of a small tier reads a prefix of the blocks staged for a larger one: blocks are clipped to the call
one = triton_paged_attention(*[a[:1] if i in (0, 4, 5) else a for i, a in enumerate(largs)],
                             blocks=(torch.tensor([0, 16], dtype=torch.int32), torch.tensor([16, 16], dtype=torch.int32)))
assert torch.allclose(one, lref[:1], atol=1e-5, rtol=1e-5)
# prompt rows take the prefill kernel (one pass over the keys), generated rows the split kernel, in one forward
from sparkdec.ops.attention import _cuda_attention
mixed_rows = [(list(range(0, 40)), [300], False), (list(range(64, 200)), list(range(0, 37)), False),
              (list(range(0, 40)), list(range(200, 230)), False)]
mixed = build_context(mixed_rows, ps, "cpu", prompt_from=1)
assert mixed.prompt_row == 1 and mixed.blocks_host == [(0, 1)]
assert list(zip(mixed.prompt_lead.tolist(), mixed.prompt_rows.tolist())) == [(1, 16), (17, 16), (33, 5), (38, 16), (54, 14)]
qm = torch.randn(mixed.num_tokens, hq, d)
mref = paged_attention(qm, kc, vc, mixed, d ** -0.5)
assert torch.allclose(_cuda_attention(qm, kc, vc, mixed, d ** -0.5), mref, atol=1e-5, rtol=1e-5)
import sparkdec.ops.triton_attention as ta
ta.WORKSPACE_BYTES = 1  # a long eager chunk runs in row ranges on block boundaries: the same bits
chunked = triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, 2200, d ** -0.5,
                                 row_kv_len_host=ctx.row_kv_len_host, blocks=blocks, blocks_host=ctx.blocks_host)
assert torch.equal(chunked, grouped)
assert torch.allclose(triton_paged_attention(*largs, row_kv_len_host=long.row_kv_len_host,
                                             blocks=(long.block_lead, long.block_rows), blocks_host=long.blocks_host),
                      lout, atol=1e-6, rtol=1e-6)  # smaller query tiles for the smaller ranges
ta.FINE_END = 0  # 128-key splits throughout (the rows at 2100 have split both ways above)
ta.COMBINE_PRELOAD = False  # (the reference schedule; on below)
coarse = triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, 2200, d ** -0.5)
assert torch.allclose(coarse, ref, atol=1e-5, rtol=1e-5)
ta.COMBINE_UNROLL = not ta.COMBINE_UNROLL  # the combine's chunk loops unrolled or not: the same operations
assert torch.equal(triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, 2200,
                                          d ** -0.5), coarse)
ta.COMBINE_UNROLL = True
ta.COMBINE_STATIC_CHUNKS = 1  # one chunk unrolled, the rest in the loop that stops at each row's own splits
for bound, loop in ((2200, False), (9000, False), (9000, True)):  # ... a grid sized for a longer context (as a
    ta.COMBINE_WHILE = loop  # graph's), the rest in a while loop: the same bits
    assert torch.equal(triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, bound,
                                              d ** -0.5), coarse), bound
ta.SPLIT_DEAD_EXIT = True  # programs with no key end without waiting: the same bits
ta.SPLIT_KV_TOGETHER = True  # a step's values loaded with its keys: the same bits
ta.SPLIT_PAGES_EARLY = True  # the first step's page ids before the wait: the same bits
ta.COMBINE_PRELOAD = True  # the unrolled chunks' loads issued together: the same bits
for static in (1, 2):
    ta.COMBINE_STATIC_CHUNKS = static
    assert torch.equal(triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, 9000,
                                              d ** -0.5), coarse), static
for bound in (2200, 9000):
    assert torch.equal(triton_paged_attention(q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, bound,
                                              d ** -0.5), coarse), bound
print("ok")
"""


def test_triton_attention_matches_reference_in_interpreter():
    """The CUDA kernel's logic, run by Triton's CPU interpreter (set before triton is imported), against the
    reference attention: causal rows, a bidirectional drafter block, split boundaries and more splits than
    the combine reduces in one chunk."""
    import os
    import subprocess
    import sys

    import pytest

    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", TRITON_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]


def test_triton_gemm_rope_and_fused_layer_match_reference_in_interpreter():
    """tests/triton_checks.py under Triton's interpreter: the batch-invariant GEMM (plain, SiLU and
    residual epilogues; rows equal for every M), the q/k norm + RoPE + KV store kernel, and a whole fused
    decoder layer against the reference layer."""
    import os
    import pathlib
    import subprocess
    import sys

    import pytest

    pytest.importorskip("triton")
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(root))
    res = subprocess.run([sys.executable, str(root / "tests" / "triton_checks.py")], env=env, capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]
