"""Run by tests/test_ops.py under TRITON_INTERPRET=1: the CUDA kernels' logic against the reference ops, on CPU."""
from __future__ import annotations

import torch

from sparkdec.config import TargetConfig
from sparkdec.engine.context import build_context
from sparkdec.models.qwen3 import Qwen3DecoderLayer
from sparkdec.ops.norms import rms_norm
from sparkdec.ops.rope import RotaryTable
from sparkdec.ops.triton_fused import qkv_rope_store
from sparkdec.ops import triton_gemm
from sparkdec.ops.triton_gemm import gemm, interleave_gate_up


def close(a, b, tol=1e-4):
    assert torch.allclose(a, b, rtol=tol, atol=tol), (a - b).abs().max()


def check_gemm():
    for n, k, cfg in [(48, 40, None), (200, 96, None), (33, 300, None), (200, 128, (32, 32, 4, 4, 2)),
                      (64, 128, (32, 16, 2, 4, 2))]:
        if cfg:  # split-K: slices reduced by the tile's last program, in slice order
            triton_gemm.CONFIGS[(n, k)] = triton_gemm.CONFIGS[(2 * n, k)] = cfg
        w, x, r = torch.randn(n, k), torch.randn(40, k), torch.randn(40, n)
        out = gemm(x, w)
        close(out, x @ w.T)
        for m in (1, 5, 16, 17, 39):  # a row's result does not depend on how many rows share the call
            assert torch.equal(gemm(x[:m], w), out[:m]), (n, k, m)
        close(gemm(x, w, residual=r), r + x @ w.T)
        xh, wh = x.to(torch.bfloat16), w.to(torch.bfloat16)  # float32 logits: rounded to bf16 first, one launch
        assert torch.equal(gemm(xh, wh, out_dtype=torch.float32), gemm(xh, wh).float())
        g, u = torch.randn(n, k), torch.randn(n, k)
        # against float64, within float32 rounding of the products' magnitudes (an entry where x @ u nearly cancels
        # has a large relative error in any summation order: a fixed relative tolerance flickers with numpy's)
        x64, g64, u64 = x.double(), g.double(), u.double()
        want = torch.nn.functional.silu(x64 @ g64.T) * (x64 @ u64.T)
        scale = (x64.abs() @ g64.abs().T + 1) * (x64.abs() @ u64.abs().T)
        err = (gemm(x, interleave_gate_up(g, u), silu=True).double() - want).abs()
        assert (err <= 1e-5 * scale).all(), float((err / scale).max())
    assert all(int(c.abs().sum()) == 0 for c in triton_gemm._COUNTERS.values()), "split-K counters not reset"
    triton_gemm.MAX_TILES = 4  # more tiles than the counter buffer holds: it grows, results unchanged
    triton_gemm._COUNTERS.clear()
    w, x = torch.randn(200, 128), torch.randn(300, 128)
    triton_gemm.CONFIGS[(200, 128)] = (32, 32, 4, 4, 2)
    small = gemm(x[:10], w)
    assert torch.equal(gemm(x[:60], w)[:10], small) and len(triton_gemm._RETIRED) == 1
    # 64- and 128-row tiles (prefill): the same K order; bitwise equality is checked on the GPU (the
    # interpreter's numpy products round differently per matrix shape)
    for m in (100, 300):
        close(gemm(x[:m], w, residual=x[:m, :64].repeat(1, 4)[:, :200].contiguous())[:10],
              small + x[:10, :64].repeat(1, 4)[:, :200], 1e-5)


def check_gemm_tiled():
    """A weight stored tile by tile (ops/tiled_weights.py) gives the row-major weight's bits: split-K 1 and 4, SiLU,
    the 16-row tile and the prefill tiles (64 and 128 rows, BLOCK_K 64 across a 128-wide weight tile)."""
    from sparkdec.ops.tiled_weights import set_tiled_

    for n, k, cfg, tiles in [(128, 256, (32, 128, 1, 4, 2), (64, 128)), (256, 512, (32, 64, 4, 4, 2), (64, 128)),
                             (192, 256, (64, 256, 1, 4, 2), (64, 256))]:
        triton_gemm.CONFIGS[(n, k)] = cfg
        w, x, r = torch.randn(n, k), torch.randn(300, k), torch.randn(300, n // 2)
        want = {m: (gemm(x[:m], w), gemm(x[:m], w, silu=True, residual=r[:m])) for m in (1, 16, 100, 300)}
        set_tiled_(w, tiles)
        for m, (plain, silu) in want.items():
            assert torch.equal(gemm(x[:m], w), plain), (n, k, m)
            assert torch.equal(gemm(x[:m], w, silu=True, residual=r[:m]), silu), (n, k, m, "silu")
        del triton_gemm.CONFIGS[(n, k)]


def check_qkv_rope_store():
    from sparkdec.ops import triton_fused

    shipped = triton_fused.ROPE_V_EARLY
    for early in (False, True):  # ROPE_V_EARLY: the values loaded with the keys, the same copy
        triton_fused.ROPE_V_EARLY = early
        _check_qkv_rope_store()
    triton_fused.ROPE_V_EARLY = shipped


def _check_qkv_rope_store():
    t, hq, hkv, d = 5, 4, 2, 16
    rope = RotaryTable(d, 1e4, 64)
    qkv, qw, kw = torch.randn(t, (hq + 2 * hkv) * d), torch.randn(d), torch.randn(d)
    pos, slots = torch.tensor([3, 9, 10, 40, 63]), torch.tensor([7, 0, 2, 30, 31])
    kc, vc = torch.zeros(32, hkv, d), torch.zeros(32, hkv, d)
    q = qkv_rope_store(qkv, hq, hkv, qw, kw, 1e-6, rope.cos, rope.sin, pos, slots, kc, vc)
    heads = qkv.view(t, hq + 2 * hkv, d)
    close(q, rope.apply(rms_norm(heads[:, :hq], qw, 1e-6), pos))
    close(kc[slots], rope.apply(rms_norm(heads[:, hq:hq + hkv], kw, 1e-6), pos))
    assert torch.equal(vc[slots], heads[:, hq + hkv:])
    kc2, vc2 = torch.zeros_like(kc), torch.zeros_like(vc)
    assert qkv_rope_store(qkv[:, hq * d:], 0, hkv, None, kw, 1e-6, rope.cos, rope.sin, pos, slots, kc2, vc2) is None
    assert torch.equal(kc2, kc) and torch.equal(vc2, vc)


def check_qkv_rope_store_from_slices():
    """The qkv product's split-K slices (ops/partials.Partials, triton_gemm.QKV_SLICES_TO_ROPE) summed by the RoPE
    kernel: the same q, keys and values as from the tensor the product's last program would have written."""
    from sparkdec.ops import triton_fused
    from sparkdec.ops.partials import Partials

    t, hq, hkv, d, bn, mp, split = 5, 4, 2, 16, 32, 8, 3
    n = (hq + 2 * hkv) * d
    tiles = n // bn
    ws = torch.randn(split, tiles, mp, bn)
    summed = torch.zeros(tiles, mp, bn)
    for s in range(split):  # from zero, in slice order
        summed += ws[s]
    qkv = summed[:, :t].permute(1, 0, 2).reshape(t, n).contiguous()  # [tiles, MP, BN] -> [T, N]
    rope = RotaryTable(d, 1e4, 64)
    qw, kw = torch.randn(d), torch.randn(d)
    pos, slots = torch.tensor([3, 9, 10, 40, 63]), torch.tensor([7, 0, 2, 30, 31])
    shipped = triton_fused.ROPE_V_EARLY
    for early in (False, True):
        triton_fused.ROPE_V_EARLY = early
        got, want = [], []
        for src, out in ((Partials(ws.flatten(), None, torch.empty(t, n), split, tiles, bn, mp), got), (qkv, want)):
            kc, vc = torch.zeros(32, hkv, d), torch.zeros(32, hkv, d)
            out += [qkv_rope_store(src, hq, hkv, qw, kw, 1e-6, rope.cos, rope.sin, pos, slots, kc, vc), kc, vc]
        assert all(torch.equal(a, b) for a, b in zip(got, want)), early
    triton_fused.ROPE_V_EARLY = shipped


def check_markov_step():
    from sparkdec.ops.triton_markov import markov_step

    b, v, r, gamma = 3, 300, 32, 5
    w1, w2, u = torch.randn(v, r), torch.randn(v, r), torch.randn(b, gamma, v)
    u[0, 0, 10] = u[0, 0, 200] = u[1, 0, 20] = u[1, 0, 21] = 1e4  # ties across and within tiles: smaller id wins
    u[2, 1, 40] = u[2, 1, 260] = 1e4  # a tie in a slot whose programs walk their tiles backwards
    w2[200], w2[21], w2[260] = w2[10], w2[20], w2[40]
    prev, ref_prev = torch.tensor([1, 7, 299]), torch.tensor([1, 7, 299])
    drafts, z = torch.empty(b, gamma, dtype=torch.long), torch.empty(b, gamma, v)
    for k in range(gamma):
        ref_z = u[:, k] + w1[ref_prev] @ w2.T
        ref_prev = ref_z.argmax(-1)
        markov_step(prev, w1, w2, u[:, k], z[:, k], drafts[:, k])
        close(z[:, k], ref_z)
        assert torch.equal(drafts[:, k], ref_prev) and torch.equal(prev, ref_prev), (k, drafts[:, k], ref_prev)
    assert drafts[0, 0] == 10 and drafts[1, 0] == 20 and drafts[2, 1] == 40
    check_markov_chain(w1, w2, u, torch.tensor([1, 7, 299]), z, drafts)


def check_markov_chain(w1, w2, u, anchors, z_ref, drafts_ref):
    """The whole chain in γ launches (programs over tile ranges, partials reduced by the next slot) gives the z and
    drafts of markov_step slot by slot, for several program counts (ties across program ranges included)."""
    from sparkdec.ops import triton_markov

    for programs in (1, 2, 3, 5):
        triton_markov.CHAIN_PROGRAMS = programs
        z, drafts = torch.empty_like(z_ref), torch.empty_like(drafts_ref)
        triton_markov.markov_chain(anchors, w1, w2, u, z, drafts)
        assert torch.equal(z, z_ref) and torch.equal(drafts, drafts_ref), (programs, drafts, drafts_ref)
    # the last draft reduced by the confidence kernel instead (the propose's fused tail)
    from sparkdec.ops.triton_propose import confidences

    z, drafts = torch.empty_like(z_ref), torch.full_like(drafts_ref, -1)
    tail = triton_markov.markov_chain(anchors, w1, w2, u, z, drafts, finish=False)
    assert (drafts[:, -1] == -1).all()
    h = torch.randn(*drafts.shape, 8)
    confidences(h, None, anchors, drafts, torch.randn(1, 8), torch.randn(1), tail)
    assert torch.equal(drafts, drafts_ref), (drafts, drafts_ref)
    triton_markov.CHAIN_PROGRAMS = 264


def check_coupled_chain():
    """The chain's coupled rows (spec/coupling.py) draft argmax z / T - log E with the target's keyed noise, as the
    propose's torch pick does; the other rows stay the argmax; the same drafts whatever the program count."""
    from sparkdec.ops import triton_markov
    from sparkdec.sampling import SamplingParams
    from sparkdec.spec.coupling import coupled_gumbels, coupled_token, race_rows, race_tensors

    b, v, r, gamma = 3, 300, 32, 4
    w1, w2, u = torch.randn(v, r), torch.randn(v, r), torch.randn(b, gamma, v) * 2
    anchors, apos = torch.tensor([1, 7, 299]), [5, 2 ** 31 + 3, 40]
    seqs = [type("S", (), {"seed": seed, "params": SamplingParams(temperature=t)})()
            for seed, t in ((11, 0.8), (0, 1.0), ((1 << 62) + 9, 1.3))]
    coupled = race_rows(seqs, [True, False, True])
    prev, want = anchors.clone(), torch.empty(b, gamma, dtype=torch.long)
    gumbels = [coupled_gumbels(s.seed, p, gamma, v, "cpu") for s, p in zip(seqs, apos)]
    for k in range(gamma):
        z = u[:, k] + w1[prev] @ w2.T
        prev = torch.stack([coupled_token(z[i], seqs[i].params, gumbels[i][k]) if coupled[i] else z[i].argmax()
                            for i in range(b)])
        want[:, k] = prev
    plain = torch.empty(b, gamma, dtype=torch.long)
    triton_markov.markov_chain(anchors, w1, w2, u, torch.empty(b, gamma, v), plain)
    assert not torch.equal(plain[[0, 2]], want[[0, 2]])  # the race changed the coupled rows' drafts
    for programs in (1, 3):
        triton_markov.CHAIN_PROGRAMS = programs
        drafts = torch.empty(b, gamma, dtype=torch.long)
        triton_markov.markov_chain(anchors, w1, w2, u, torch.empty(b, gamma, v), drafts,
                                   coupling=race_tensors(coupled, apos, "cpu"))
        assert torch.equal(drafts, want), (programs, drafts, want)
        assert torch.equal(drafts[1], plain[1])
    triton_markov.CHAIN_PROGRAMS = 264


def check_propose_kernels():
    """ops/triton_propose.py: the block's embedded rows and the confidence head against the torch reference."""
    from sparkdec.models.dspark import ConfidenceHead
    from sparkdec.ops.triton_propose import block_embed, confidences

    v, d, r, gamma = 50, 40, 8, 4
    table, w1 = torch.randn(v, d), torch.randn(v, r)
    anchors, drafts = torch.tensor([3, 49]), torch.tensor([[5, 6, 7, 8], [0, 1, 2, 9]])
    ids = torch.full((2, gamma), 11)
    ids[:, 0] = anchors
    assert torch.equal(block_embed(table, anchors, gamma, 11), table[ids.view(-1)])
    h = torch.randn(2, gamma, d)
    for with_e in (True, False):
        head = ConfidenceHead(d + (r if with_e else 0))
        es = w1[torch.cat([anchors[:, None], drafts[:, :-1]], 1)] if with_e else None
        got = confidences(h, w1 if with_e else None, anchors, drafts, head.proj.weight.data, head.proj.bias.data)
        close(got, head(h, es).detach(), 1e-5)


def check_keyed_race():
    """ops/triton_sample.py: the race argmax_i x_i / T - log E_i with sampling's keyed noise, per row, for small
    and large integer arguments (Triton passes small ints as int32), with top-k and top-p masks."""
    from sparkdec.ops.triton_noise import M1
    from sparkdec.ops.triton_sample import keyed_race
    from sparkdec.sampling import STREAM_TARGET, SamplingParams, _top_p_drop, fused_rows, uniform_noise

    def race(x, t, seed, pos, keep=None):  # reference: the same race with torch ops and sampling.uniform_noise
        score = (x / t).double() - torch.log(-torch.log(uniform_noise(seed, pos, STREAM_TARGET, x.shape[-1], "cpu")))
        return int(torch.argmax(score if keep is None else torch.where(keep, score, float("-inf"))))

    r, v, t, seed, pos0 = 5, 3000, 0.8, 1234567, 41
    x = torch.randn(r, v) * 3
    got = fused_rows(x, SamplingParams(temperature=t), seed, pos0).tolist()
    assert got == [race(x[i], t, seed, pos0 + i) for i in range(r)], got
    assert fused_rows(x[2:3], SamplingParams(temperature=t), seed, pos0 + 2).tolist() == got[2:3]  # rows alone
    p = SamplingParams(temperature=t, top_k=20, top_p=0.7)
    xs = x / t
    kth = torch.topk(xs, 20, dim=-1).values[:, -1:]
    xk = xs.masked_fill(xs < kth, float("-inf"))
    keep = [(xs[i] >= kth[i]) & ~_top_p_drop(torch.softmax(xk[i], -1), 0.7) for i in range(r)]
    assert fused_rows(x, p, seed, pos0).tolist() == [race(x[i], t, seed, pos0 + i, keep[i]) for i in range(r)]
    for key_base, pos in ((5, 1), ((1 << 64) - 3, 7), (123456789012345678, 2 ** 31 + 5)):  # raw keys, no seed
        want = []
        for i in range(2):
            k = (key_base + (pos + i) * M1) % (1 << 64)  # sampling._mix's mixing of a raw sum
            k ^= k >> 30
            k = (k * 0xBF58476D1CE4E5B9) % (1 << 64)
            k ^= k >> 27
            k = (k * 0x94D049BB133111EB) % (1 << 64)
            seedless = _noise_with_key((k ^ (k >> 31)) & ((1 << 63) - 1), v)
            want.append(int(torch.argmax((x[i] / 1.3).double() - torch.log(-torch.log(seedless)))))
        assert keyed_race(x[:2], 1.3, key_base, pos).tolist() == want, (key_base, pos)


def _noise_with_key(key: int, n: int) -> torch.Tensor:
    """sampling.uniform_noise's formula for a raw 63-bit key."""
    from sparkdec.sampling import _GOLDEN, _M1, _M2, _shr

    x = torch.arange(1, n + 1, dtype=torch.int64) * _GOLDEN + key
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    x = x ^ _shr(x, 31)
    return (_shr(x, 12).double() + 0.5) * 2.0 ** -52


def check_fused_layer():
    cfg = TargetConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6, rope_theta=1e4,
                       max_position_embeddings=128, tie_word_embeddings=True)
    ref, fused = Qwen3DecoderLayer(cfg), Qwen3DecoderLayer(cfg)
    for p in ref.parameters():
        torch.nn.init.normal_(p, std=0.3)
    fused.load_state_dict(ref.state_dict())
    fused.fuse()
    rope, ps = RotaryTable(16, 1e4, 128), 16
    ctx = build_context([(list(range(4)), list(range(0, 20)), False), (list(range(4, 8)), [5, 6, 7], True)], ps, "cpu")
    h = torch.randn(ctx.num_tokens, 64)
    caches = [(torch.zeros(8 * ps, 2, 16), torch.zeros(8 * ps, 2, 16)) for _ in range(2)]
    with torch.no_grad():
        want = ref(h, ctx, caches[0], rope)
        got = fused._fused_forward(h, ctx, caches[1], rope)
    close(got, want)
    close(caches[1][0], caches[0][0])
    close(caches[1][1], caches[0][1])


def check_norm_of_slices():
    """ops/triton_fused.norm_of over a split-K product's unsummed slices (ops/partials.py): the slices summed from zero
    in slice order, rounded, plus the residual, then the norm: bit for bit what the product's last program and the
    plain norm kernel give, for every row of the padded tile (a partial last weight tile too). (The device test
    test_split_k_slices_summed_by_the_norm_give_the_same_bits checks it against the products on the H200.)"""
    from sparkdec.ops.partials import Partials
    from sparkdec.ops.triton_fused import norm_of
    from sparkdec.ops.triton_fused import rms_norm as fused_rms_norm

    split, tiles, bn, mp, n, m = 3, 4, 64, 8, 200, 5
    ws = torch.randn(split, tiles, mp, bn)
    res, w = torch.randn(m, n), 1 + 0.1 * torch.randn(n)  # float32: the interpreter's bf16 products are not IEEE
    total = torch.zeros(tiles * bn, mp)
    for sl in range(split):
        total = total + ws[sl].transpose(1, 2).reshape(tiles * bn, mp)
    h_ref = res + total[:n, :m].T  # [m, n]
    part = Partials(ws.reshape(-1).contiguous(), res, torch.empty(m, n), split, tiles, bn, mp)
    x, h = norm_of(part, w, 1e-6)
    assert h is part.out and torch.equal(h, h_ref)
    assert torch.equal(x, fused_rms_norm(h_ref, w, 1e-6))


def top_p_reference(probs: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """probs [R, V] -> (drop [R, V] by token id from a float64 scan, the distance of the mass before each token
    from top_p [R, V] by token id: a float32 scan may decide a token that close either way)."""
    sorted_p, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    before = torch.cumsum(sorted_p.double(), -1) - sorted_p.double()
    drop = torch.zeros_like(idx, dtype=torch.bool).scatter_(-1, idx, before >= top_p)
    return drop, torch.empty_like(before).scatter_(-1, idx, (before - top_p).abs())


def agrees_with_float64(got: torch.Tensor, probs: torch.Tensor, top_p: float, tol: float) -> bool:
    """got (a drop mask of probs) is the float64 scan's except for tokens whose mass before them is within tol."""
    want, dist = top_p_reference(probs, top_p)
    return not bool(((got != want) & (dist > tol)).any())


def check_top_p_drop():
    """ops/triton_top_p.py + sampling.suffix_drop: the kept set of a float64 scan up to tokens within rounding of the
    boundary, for a vocabulary of one chunk and of several with a partial last chunk; a row alone gets its bits in
    any batch; and the kept set is a prefix of the sorted order even where rounding makes the test flicker at a
    chunk boundary (tail probabilities below one float32 step of the mass, top_p right there)."""
    from sparkdec.ops.triton_top_p import mass_reached
    from sparkdec.sampling import after_first_past, suffix_drop

    def drop_mask(sorted_p, idx, top_p):
        past = mass_reached(sorted_p, top_p)
        ref = suffix_drop(past, idx)
        by_id = torch.empty_like(sorted_p).scatter_(-1, idx, sorted_p)
        assert torch.equal(after_first_past(past, sorted_p, idx, by_id), ref)  # the shipped mask is the reference's
        return ref

    for v, top_p in ((700, 0.9), (5000, 0.95), (5000, 0.5)):
        probs = torch.softmax(torch.randn(6, v) * 3, dim=-1)
        sorted_p, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
        got = drop_mask(sorted_p, idx, top_p)
        assert agrees_with_float64(got, probs, top_p, 1e-6), (v, top_p)
        assert 0 < int((~got).sum(-1).min()) and int((~got).sum(-1).max()) < v  # both kinds occur
        for r in range(6):
            assert torch.equal(drop_mask(sorted_p[r:r + 1], idx[r:r + 1], top_p)[0], got[r])
    gen = torch.Generator().manual_seed(1)
    head = torch.rand(8, 2048, generator=gen, dtype=torch.float64) ** 8 + 1e-3
    tail = 3e-8 * torch.rand(8, 2048, generator=gen, dtype=torch.float64)
    probs = torch.cat([head / head.sum(-1, keepdim=True) * (1 - tail.sum(-1, keepdim=True)), tail], -1).float()
    sorted_p, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    flickers = 0
    for top_p in torch.cumsum(sorted_p[0], 0)[2044:2052].tolist():
        past = mass_reached(sorted_p, top_p)
        flickers += int((past != past.cummax(-1).values).any(-1).sum())
        kept = ~suffix_drop(past, idx).gather(-1, idx)  # in sorted order
        probs_by_id = torch.empty_like(sorted_p).scatter_(-1, idx, sorted_p)
        assert torch.equal(after_first_past(past, sorted_p, idx, probs_by_id), suffix_drop(past, idx))
        assert torch.equal(kept, kept.cummin(-1).values)  # a prefix: no kept entry after a dropped one
    assert flickers  # the case the closure is there for did occur (19 rows of 64 when written)


def check_nucleus():
    """ops/triton_nucleus.py: top-p's kept set with no sort equals a float64 scan's (up to tokens within rounding of
    the boundary) for vocabularies of one chunk and of several, with the cut inside a run of equal probabilities and
    with nothing cut; a row alone gets the bits it gets in a batch; and the race's tokens are the reference race's
    (x / T - log E_i over the kept tokens, sampling's keyed noise) with top-k and top-p."""
    from sparkdec.ops.triton_nucleus import KEEP_ALL, nucleus, race
    from sparkdec.sampling import STREAM_TARGET, _mix, uniform_noise

    def kept(p, cut):
        v = cut[:, 0].view(torch.float32)[:, None]
        return (p > v) | ((p == v) & (torch.arange(p.shape[1])[None] < cut[:, 1:2]))

    for v, top_p, t in ((700, 0.9, 1.0), (5000, 0.95, 0.8), (5000, 0.5, 1.3)):
        x = torch.randn(4, v) * 3
        p, cut = nucleus(x, t, top_p)
        probs = torch.softmax(x.double() / t, -1)
        assert agrees_with_float64(~kept(p, cut), probs, top_p, 1e-5), (v, top_p)
        p2, cut2 = nucleus(x[2:3], t, top_p)
        assert torch.equal(p2[0], p[2]) and torch.equal(cut2[0], cut[2])  # a row alone: the same bits
    x = torch.zeros(2, 3000)
    x[1, :10] = 5.0  # row 0: 3000 equal probabilities; row 1: 10 large ones, then 2990 equal ones
    p, cut = nucleus(x, 1.0, 0.5)
    assert kept(p, cut).sum(-1).tolist() == [1500, 763] and cut[:, 1].tolist() == [1500, 763]
    p, cut = nucleus(x, 1.0, 1.5)  # top_p above the whole mass: nothing is cut
    assert cut[:, 0].tolist() == [KEEP_ALL] * 2 and bool(kept(p, cut).all())
    r, v, t = 4, 5000, 0.7
    x = torch.randn(r, v) * 0.5  # flat: the race's winner over all tokens is mostly one the masks exclude
    keys = [_mix(99, 10 + i, STREAM_TARGET) for i in range(r)]
    xs = x / t
    kth = torch.topk(xs, 50, dim=-1).values[:, -1].contiguous()
    masked = 0
    for top_p, k in ((1.0, None), (0.05, None), (0.8, kth)):
        got = race(x, t, torch.tensor(keys), top_p, k).tolist()
        want = []
        for i in range(r):
            xi = xs[i] if k is None else xs[i].masked_fill(xs[i] < k[i], float("-inf"))
            keep = torch.ones(v, dtype=torch.bool) if top_p == 1.0 else ~top_p_reference(
                torch.softmax(xi.double(), -1)[None], top_p)[0][0]
            noise = -torch.log(-torch.log(uniform_noise(99, 10 + i, STREAM_TARGET, v, "cpu")))
            want.append(int(torch.argmax(torch.where(keep, xi.double() + noise, float("-inf")))))
            masked += want[-1] != int(torch.argmax(xs[i].double() + noise))
        assert got == want, (top_p, got, want)
    assert masked >= 4  # the masks decided some draws

def check_whole_race():
    """engine/sampler_graphs.py races all rows of a graph's logits, the rows past the live ones on key 0: each live
    row's token is the one the race of the live rows alone gives (top-p and top-k), also beside a NaN row."""
    from sparkdec.sampling import STREAM_TARGET, SamplingParams, _mix, keyed_kernel_race

    whole = torch.randn(6, 3000) * 3
    whole[5] = float("nan")  # (a padding row's logits are whatever its trash rows computed)
    for params in (SamplingParams(temperature=0.8, top_p=0.9), SamplingParams(temperature=1.1, top_k=40, top_p=0.7)):
        for lo, n in ((0, 1), (1, 3), (4, 1)):
            live = [_mix(5, 100 + lo + i, STREAM_TARGET) for i in range(n)]
            padded = [0] * lo + live + [0] * (whole.shape[0] - lo - n)
            alone = keyed_kernel_race(whole[lo:lo + n], params, torch.tensor(live))
            among = keyed_kernel_race(whole, params, torch.tensor(padded))
            assert torch.equal(among[lo:lo + n], alone), (params, lo, n)


def check_argmax():
    """The two-launch row argmax equals torch.argmax, ties (bf16-rounded logits) going to the lowest index."""
    from sparkdec.ops import triton_argmax

    torch.manual_seed(0)
    for v in (10, 4096, 4097, 9000):
        x = torch.randn(3, v).to(torch.bfloat16).float()  # many ties
        x[1, :] = 0.5  # every entry ties: index 0
        x[2, v - 1] = 100.0  # the maximum in the last chunk
        assert torch.equal(triton_argmax.argmax_kernels(x), x.argmax(-1)), v
        y = torch.randn(2, 2 * v)[:, ::2]  # rows not contiguous in memory... columns strided: not the kernels' case
        assert torch.equal(triton_argmax.argmax_rows(y), y.argmax(-1))


def check_argmax_advance():
    """The pick kernel's ADVANCE moves exactly the rows whose flag is set on to their next step (token as id, position
    and keys + 1, the next position's slot from the row's block table), as the torch reference does; a row whose next
    page lies past its table and the flagless rows stay as they were. With a ring, each flagged row's token goes to
    its step's slot (flag - 1) and the flag moves to the next slot."""
    from sparkdec.ops import triton_argmax

    ps, pages = 4, 3
    x = torch.randn(4, 5000)
    t = x.argmax(-1)
    tables = torch.tensor([[7, 2, 9], [5, 6, 1], [0, 0, 0]])
    meta = torch.tensor([[0, 0, 0, 0], [6, 3, 11, 2], [90, 91, 92, 93], [7, 4, 12, 3], [1, 0, 2, 2]])  # ids .. row_seq
    for ring_slots in (0, 3):
        stage = {"kernel": meta.clone(), "reference": meta.clone()}
        rings = {name: torch.full((ring_slots, 4), -1) for name in stage}
        flags = {name: torch.tensor([1, 3, 1, 0]) for name in stage}
        for name, st in stage.items():
            # row 1 crosses into page 1 of its table; row 2's next page lies past its table
            ids, pos, slots, row_len, seq = st.unbind(0)
            a = triton_argmax.Advance(flags[name], ids, pos, slots, row_len, seq, tables, ps,
                                      rings[name] if ring_slots else None)
            if name == "kernel":
                tokens = triton_argmax.argmax_kernels(x, a)
            else:
                tokens = x.argmax(-1)
                triton_argmax.advance_reference(tokens, a)
            assert torch.equal(tokens, t)
        assert torch.equal(stage["kernel"], stage["reference"]), (stage["kernel"], stage["reference"])
        ids, pos, slots, row_len, _ = stage["kernel"].unbind(0)
        assert ids.tolist() == [int(t[0]), int(t[1]), 0, 0] and pos.tolist() == [7, 4, 11, 2]
        assert row_len.tolist() == [8, 5, 12, 3] and slots.tolist() == [6 * ps + 3, 2 * ps + 0, 92, 93]  # tables 1, 0
        if ring_slots:
            assert torch.equal(rings["kernel"], rings["reference"]) and torch.equal(flags["kernel"], flags["reference"])
            want = torch.full((3, 4), -1)
            want[0, 0], want[2, 1], want[0, 2] = t[0], t[1], t[2]  # row 2 (past its table) still reports its token
            assert torch.equal(rings["kernel"], want) and flags["kernel"].tolist() == [2, 1, 2, 0]


def check_chain_stage():
    """The chained propose's staging kernel writes what its torch form does: each sequence's accepted drafts (none,
    some, all verified, a mismatch past ℓ ignored), next anchor, the block's positions, slots (crossing a page) and
    keys per row, and the padding rows; simulated acceptance too."""
    from sparkdec.ops.triton_chain import stage_kernel
    from sparkdec.spec.chain import stage_reference

    g, ps, tier, trash = 7, 4, 4, 99 * 4
    drafts = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [1, 2, 3, 4, 5, 6, 7], [9, 9, 9, 9, 9, 9, 9]])
    first = torch.tensor([5, 6, 7, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9])  # 2 matches past its ℓ
    vals = torch.tensor([[0, 8, 16], [7, 7, 2], [10, 20, 3]])  # anchor rows, drafts verified, anchor positions
    tables = torch.arange(40).view(4, 10) + 1  # [tier, pages]
    expected = {None: [first[3], first[15], first[18], 0], 3: [first[2], first[10], first[18], 0]}  # accepted 3, 7, 2
    for al in (3, None):  # (greedy last: its rows are checked below)
        got, want = ([torch.full((tier * g,), -5) for _ in range(3)] + [torch.full((tier,), -5)] for _ in range(2))
        stage_kernel(first, drafts, vals, tables, (got[3], *got[:3]), tier, ps, trash, al)
        stage_reference(first, drafts, vals, tables, (want[3], *want[:3]), tier, ps, trash, al)
        for a, b in zip(got, want):
            assert torch.equal(a, b), (al, a, b)
        assert want[3].tolist() == [int(x) for x in expected[al]], (al, want[3])
    slots = [18 * ps + p % ps for p in range(28, 32)] + [19 * ps + p % ps for p in range(32, 35)]  # pages 7, 8
    assert got[0][7:14].tolist() == list(range(28, 35)) and got[1][7:14].tolist() == slots
    assert got[2][21:].tolist() == [g] * g and got[1][21:].tolist() == [trash] * g


if __name__ == "__main__":
    torch.manual_seed(0)
    check_gemm()
    check_gemm_tiled()
    check_qkv_rope_store()
    check_qkv_rope_store_from_slices()
    check_fused_layer()
    check_markov_step()
    check_coupled_chain()
    check_propose_kernels()
    check_keyed_race()
    check_top_p_drop()
    check_norm_of_slices()
    check_nucleus()
    check_whole_race()
    check_argmax()
    check_argmax_advance()
    check_chain_stage()
    print("ok")
