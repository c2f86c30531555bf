"""The attention combine for one decode row in Gluon, as a product's x: the o product reduces the splits itself.

`triton_attention.COMBINE_IN_O` (staged, off): a lone decode row whose keys fit in 2 chunks of splits (32 splits:
up to 2048 keys) skips the combine kernel; each program of the o product (ops/gluon_gemv.py, `COMBINE`) reduces the
splits of the heads its K slice covers (BK == head_dim: weight tile j of the slice is head h0 + j) and stores them as
its x tiles. The arithmetic mirrors `triton_attention._combine_splits` with COMBINE_PRELOAD and two unrolled chunks,
in the layouts Triton 3.6 gives that kernel for sm_90 (its TTGIR): the chunk's values [16, 128] in BL, the maxima and
sums [16] in B1, the values' weights in BL's row slice (loaded a second time, as Triton does). Reductions follow
the layout, so the same layouts give the combine kernel's bits; a chunk past the row's splits changes nothing, so
two chunks give the bits of one where a row has at most 16 splits.
"""
from __future__ import annotations

try:  # Gluon ships with triton >= 3.5 (ops/gluon_gemv.py checks the version before using it)
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    HAVE_GLUON = True
except ImportError:  # pragma: no cover - depends on the installed triton
    HAVE_GLUON = False

CHUNK = 16  # triton_attention.CHUNK: splits reduced at a time
CHUNKS = 2  # the chunks reduced here: rows with at most CHUNK * CHUNKS splits

if HAVE_GLUON:
    _CHUNK = gl.constexpr(CHUNK)

    @gluon.jit
    def splits_used(length, SPLIT_N: gl.constexpr, FINE_N: gl.constexpr, FINE_SPLITS: gl.constexpr):
        """How many splits hold keys 0 .. length - 1 (triton_attention.splits_covering)."""
        fine = FINE_SPLITS * FINE_N
        return gl.where(length <= fine, gl.cdiv(length, FINE_N), FINE_SPLITS + gl.cdiv(length - fine, SPLIT_N))

    @gluon.jit
    def _chunk(acc_ptr, ml_ptr, base, used, c: gl.constexpr, D: gl.constexpr, BL: gl.constexpr, B1: gl.constexpr):
        """Chunk c's maxima (in B1 and in BL's row slice), sums [16] (B1) and values [16, D] (BL)."""
        sp_b = gl.arange(0, _CHUNK, layout=gl.SliceLayout(1, BL))
        sp_1 = gl.arange(0, _CHUNK, layout=B1)
        d = gl.arange(0, D, layout=gl.SliceLayout(0, BL))
        idx_b = base + c * _CHUNK + sp_b.to(gl.int64)
        idx_1 = base + c * _CHUNK + sp_1.to(gl.int64)
        live_b = c * _CHUNK + sp_b < used
        live_1 = c * _CHUNK + sp_1 < used
        m_b = gl.load(ml_ptr + idx_b * 2, mask=live_b, other=float("-inf"))
        m_1 = gl.load(ml_ptr + idx_1 * 2, mask=live_1, other=float("-inf"))
        parts = gl.load(acc_ptr + (idx_b * D)[:, None] + d[None, :], mask=live_b[:, None] & (d < D)[None, :],
                        other=0.0)
        l_1 = gl.load(ml_ptr + idx_1 * 2 + 1, mask=live_1, other=0.0)
        return m_b, m_1, l_1, parts, live_b, live_1

    @gluon.jit
    def combine_head(acc_ptr, ml_ptr, base, used, D: gl.constexpr, num_warps: gl.constexpr):
        """One (row, head)'s splits at acc/ml [base ...] reduced -> [D] fp32 in SliceLayout(0, BL)
        (triton_attention._combine_splits, COMBINE_PRELOAD, two chunks)."""
        BL: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [num_warps, 1], [1, 0])  # [16, D] values
        B1: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])  # [16] maxima and sums
        m0_b, m0_1, l0, p0, live0_b, live0_1 = _chunk(acc_ptr, ml_ptr, base, used, 0, D, BL, B1)
        m1_b, m1_1, l1, p1, live1_b, live1_1 = _chunk(acc_ptr, ml_ptr, base, used, 1, D, BL, B1)
        m = gl.maximum(gl.maximum(m0_1, float("-inf")), m1_1)
        m_max = gl.max(m, 0)
        total = gl.where(used > 0, gl.sum(gl.where(live0_1, gl.exp(m0_1 - m_max), 0.0) * l0, 0) + 0.0, 0.0)
        w0 = gl.where(live0_b, gl.exp(m0_b - m_max), 0.0)
        acc = gl.where(used > 0, gl.sum(p0 * w0[:, None], 0) + 0.0, 0.0)
        total1 = total + gl.sum(gl.where(live1_1, gl.exp(m1_1 - m_max), 0.0) * l1, 0)
        total = gl.where(used > _CHUNK, total1, total)
        w1 = gl.where(live1_b, gl.exp(m1_b - m_max), 0.0)
        acc = gl.where(used > _CHUNK, acc + gl.sum(p1 * w1[:, None], 0), acc)
        return acc / total

    @gluon.jit
    def combine_x_slice(acc_ptr, ml_ptr, x_smem, used, head0, num_splits, NK: gl.constexpr, MP: gl.constexpr,
                        D: gl.constexpr, num_warps: gl.constexpr):
        """Heads head0 .. head0 + NK - 1 of row 0, combined and rounded to bf16 -> x_smem [NK, MP, D] (row 0; rows
        1 .. MP - 1 zeros): the x tiles of a product whose K slice these heads are."""
        XL: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [num_warps, 1], [1, 0])
        rows = gl.arange(0, MP, layout=gl.SliceLayout(1, XL))
        for j in gl.static_range(NK):
            base = (head0 + j).to(gl.int64) * num_splits  # row 0: (0 * num_heads + head) * num_splits
            out = combine_head(acc_ptr, ml_ptr, base, used, D, num_warps).to(gl.bfloat16)
            vals = gl.convert_layout(out, gl.SliceLayout(0, XL))
            tile = gl.where((rows == 0)[:, None], vals[None, :], gl.zeros([MP, D], gl.bfloat16, layout=XL))
            x_smem.index(j).store(tile)
