"""Device-only checks (pytest -m gpu): CUDA graphs equal eager, bf16 speculative output equals plain output (greedy,
and seeded sampled), and the kernels against their references."""
from __future__ import annotations

import json
import re

import pytest
import torch

from helpers import GEOMETRIES, make_bigram_draft, make_target, staggered
from sparkdec import LLM, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
PROMPTS = [[1, 5, 9, 33, 2, 7, 100, 4], [3, 4, 5], [7] * 20, list(range(40, 75))]
GREEDY = SamplingParams(max_tokens=256, ignore_eos=True)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return make_target(tmp_path_factory.mktemp("gpu") / "t", **GEOMETRIES["untied_gqa4_odd_vocab"])


def test_graph_replay_equals_eager(target):
    graphed = LLM(model=str(target), device="cuda", dtype="bfloat16").generate(PROMPTS, GREEDY)
    eager = LLM(model=str(target), device="cuda", dtype="bfloat16", cuda_graphs=False).generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in graphed] == [o.token_ids for o in eager]


@pytest.mark.parametrize("sized", [(), (12,)])
def test_short_context_decode_graph_hands_over_to_the_tiers_own(target, monkeypatch, sized):
    """A lone row replays its short-context graphs (engine/graphs.SHORT_BOUNDS) while they hold its keys, then the
    tier's own graph: the tokens are still the eager ones; also with the short graphs' attention sized for their
    bound (SHORT_SIZED: the first graph sized, the second not)."""
    from sparkdec.engine import graphs

    monkeypatch.setattr(graphs, "SHORT_SIZED", sized)
    monkeypatch.setattr(graphs, "SHORT_BOUNDS", ((12, {"PROGRAMS_ONE_ROW": 32}), (30, {})))
    llm = LLM(model=str(target), device="cuda", dtype="bfloat16")
    g = llm.engine.runner.graphs
    assert [b for b, _ in g.short[1]] == [12, 30] and g.short[1][0][1][0] is not g.graphs[1][0]
    graphed = [llm.generate([p], GREEDY)[0].token_ids for p in PROMPTS]  # prompts of 3-35 tokens: both sides
    eager = LLM(model=str(target), device="cuda", dtype="bfloat16", cuda_graphs=False)
    assert graphed == [eager.generate([p], GREEDY)[0].token_ids for p in PROMPTS]


def test_eight_sequences_of_different_lengths_in_the_short_graph_equal_eager(target):
    """Eight, three and two sequences decoding together replay tiers 8, 4 and 2's short graphs (engine/graphs.
    SHORT_TIERS, SHORT_TIER_BOUND: sized for 1280 and 2048 keys) while they hold few keys: the tokens are the eager
    ones, with rows of 3-35 prompt tokens."""
    prompts = PROMPTS + [p[::-1] for p in PROMPTS]  # 8 sequences, 4 lengths
    llm = LLM(model=str(target), device="cuda", dtype="bfloat16")
    assert [b for b, _ in llm.engine.runner.graphs.short[8]] == [1280, 2048]
    assert [b for b, _ in llm.engine.runner.graphs.short[4]] == [1280, 2048]
    eager = LLM(model=str(target), device="cuda", dtype="bfloat16", cuda_graphs=False)
    for batch in (prompts, prompts[2:5], prompts[5:7]):
        graphed = [o.token_ids for o in llm.generate(batch, GREEDY)]
        assert graphed == [o.token_ids for o in eager.generate(batch, GREEDY)]


def test_decode_replays_rewrite_what_decoding_wrote(target):
    """bench.kernels.decode_replays_ms replays the decode graph at positions already decoded, each with its own token:
    the keys and values there stay bit for bit what decoding wrote."""
    from sparkdec.bench.kernels import decode_replays_ms

    llm = LLM(model=str(target), device="cuda", dtype="bfloat16")
    eng = llm.engine
    seq = eng.add_request(PROMPTS[1], SamplingParams(max_tokens=60, ignore_eos=True))
    while not seq.output_ids:
        eng.step()
    first = seq.anchor_position
    while len(seq.output_ids) < 40:
        eng.step()
    kv = eng.runner.kv
    slots = torch.tensor([page * kv.page_size + i for page in seq.block_table for i in range(kv.page_size)],
                         device="cuda")  # this sequence's slots only: the whole cache does not fit twice
    torch.cuda.synchronize()
    before = [t[slots] for layer in kv.layers for t in layer]
    assert decode_replays_ms(eng, seq, first, stride=3) > 0
    torch.cuda.synchronize()
    assert all(torch.equal(a, t[slots]) for a, t in zip(before, [t for layer in kv.layers for t in layer]))


def test_bf16_speculative_greedy_is_bit_identical(target, tmp_path):
    plain = LLM(model=str(target), device="cuda", dtype="bfloat16")
    ref = [plain.generate([p], GREEDY)[0] for p in PROMPTS]
    draft = make_bigram_draft(tmp_path / "d", target, [p + o.token_ids for p, o in zip(PROMPTS, ref)])
    spec = LLM(model=str(target), draft=str(draft), device="cuda", dtype="bfloat16")
    outs = [spec.generate([p], GREEDY)[0] for p in PROMPTS]
    diff = sum(a != b for o, r in zip(outs, ref) for a, b in zip(o.token_ids, r.token_ids))
    assert diff == 0
    assert sum(o.stats["mean_acceptance_length"] for o in outs) / len(outs) >= 2.0


def test_bf16_speculative_sampled_equals_plain_sampled(target, tmp_path):
    """Exact sampled match: with a seed, speculative output is token for token the plain sampled output."""
    _sampled_spec_equals_plain(target, tmp_path)


def test_fused_sampler_speculative_equals_plain_and_kernel_equals_torch_race(target, tmp_path, monkeypatch):
    """SPARKDEC_FUSED_SAMPLER (ops/triton_sample.py): the same equality, and the kernel draws the tokens the torch
    race (logits / T - log E with the keyed noise) draws on the same rows."""
    from sparkdec import sampling

    monkeypatch.setattr(sampling, "FUSED_SAMPLER", True)
    _sampled_spec_equals_plain(target, tmp_path)
    x = torch.randn(8, 151936, device="cuda") * 4
    got = sampling.fused_rows(x, SamplingParams(temperature=0.7), 99, 1000).tolist()
    want = [int(torch.argmax((x[i] / 0.7).double() - torch.log(-torch.log(
        sampling.uniform_noise(99, 1000 + i, sampling.STREAM_TARGET, x.shape[1], "cuda"))))) for i in range(8)]
    assert got == want


def test_a_sequence_that_joins_keeps_the_queued_propose_with_graphs(target, tmp_path):
    """A sequence joining a greedy decode batch: the others' queued propose rows (views of the propose graph's
    static outputs) are kept while the newcomer is proposed through the same graph; output == plain."""
    plain = LLM(model=str(target), device="cuda", dtype="bfloat16")
    greedy = SamplingParams(max_tokens=96, ignore_eos=True)
    ref = [plain.generate([p], greedy)[0].token_ids for p in PROMPTS[:2]]
    draft = make_bigram_draft(tmp_path / "d", target, [p + r for p, r in zip(PROMPTS, ref)])
    engine = LLM(model=str(target), draft=str(draft), device="cuda", dtype="bfloat16").engine
    assert list(staggered(engine, (PROMPTS[0], greedy), (PROMPTS[1], greedy))) == ref


def test_batch_verify_policy_keeps_bf16_parity_with_graphs(target, tmp_path):
    """The batch policy (Algorithm 1) on CUDA graphs: its profile is taken, and with a steep cost table it trims
    (ragged verify lengths across the batch) and the batched output is still the plain output."""
    from sparkdec.spec.schedule import StepCosts

    plain = LLM(model=str(target), device="cuda", dtype="bfloat16")
    ref = plain.generate(PROMPTS, GREEDY)
    draft = make_bigram_draft(tmp_path / "d", target, [p + o.token_ids for p, o in zip(PROMPTS, ref)], confidence=True)
    spec = LLM(model=str(target), draft=str(draft), device="cuda", dtype="bfloat16", verify_policy="batch")
    costs = spec.engine.rounds.step_costs
    assert costs is not None and costs.ms == sorted(costs.ms)
    spec.engine.rounds.step_costs = StepCosts({n: 1.0 + 0.05 * n for n in (1, 2, 4, 8, 16, 32, 64)})
    outs = spec.generate(PROMPTS, GREEDY, trace=True)
    assert [o.token_ids for o in outs] == [o.token_ids for o in ref]
    verified = [r["num_verified"] for o in outs for r in o.rounds]
    assert any(0 < v < spec.engine.block_size for v in verified), verified


def _sampled_spec_equals_plain(target, tmp_path):
    params = [SamplingParams(max_tokens=128, ignore_eos=True, temperature=0.8, top_p=0.95, top_k=100, seed=5 + i)
              for i in range(len(PROMPTS))]
    plain = LLM(model=str(target), device="cuda", dtype="bfloat16")
    ref = [plain.generate([p], q)[0] for p, q in zip(PROMPTS, params)]
    draft = make_bigram_draft(tmp_path / "d", target, [p + o.token_ids for p, o in zip(PROMPTS, ref)])
    spec = LLM(model=str(target), draft=str(draft), device="cuda", dtype="bfloat16")
    outs = [spec.generate([p], q)[0] for p, q in zip(PROMPTS, params)]
    assert [o.token_ids for o in outs] == [r.token_ids for r in ref]
    assert sum(o.stats["mean_acceptance_length"] for o in outs) / len(outs) > 1.0  # some drafts were accepted


def test_row_argmax_kernels_equal_torch_argmax_with_ties():
    from sparkdec.ops.triton_argmax import argmax_rows

    torch.manual_seed(0)
    for rows in (1, 3, 8):
        x = torch.randn(rows, 151936, device="cuda").to(torch.bfloat16).float()  # bf16-rounded logits: ties
        x[0, 7] = x[0, 150000] = x[0].max() + 1  # a tie for the maximum across chunks: the lower index
        assert torch.equal(argmax_rows(x), x.argmax(-1)), rows


def test_fused_kernels_match_reference_ops_in_bf16():
    from sparkdec.ops import triton_fused as tf
    from sparkdec.ops.norms import rms_norm
    from sparkdec.ops.rope import RotaryTable

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    x, r, w = (torch.randn(37, 2560, device=dev, dtype=dt) for _ in range(2)), None, torch.randn(2560, device=dev, dtype=dt)
    x, r = x
    close = lambda a, b: torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2)
    assert close(tf.rms_norm(x, w, 1e-6), rms_norm(x, w, 1e-6))
    out, h = tf.rms_norm(x, w, 1e-6, residual=r)
    assert torch.equal(h, x + r) and close(out, rms_norm(x + r, w, 1e-6))
    rope = RotaryTable(128, 1e6, 4096, dev)
    qkv, wq, wk = torch.randn(37, 48 * 128, device=dev, dtype=dt), torch.randn(128, device=dev, dtype=dt), torch.randn(128, device=dev, dtype=dt)
    pos, slots = torch.randint(0, 4096, (37,), device=dev), torch.randperm(64, device=dev)[:37]
    kc, vc = torch.zeros(64, 8, 128, device=dev, dtype=dt), torch.zeros(64, 8, 128, device=dev, dtype=dt)
    q = tf.qkv_rope_store(qkv, 32, 8, wq, wk, 1e-6, rope.cos, rope.sin, pos, slots, kc, vc)
    heads = qkv.view(37, 48, 128)
    assert close(q, rope.apply(rms_norm(heads[:, :32], wq, 1e-6), pos))
    assert close(kc[slots], rope.apply(rms_norm(heads[:, 32:40], wk, 1e-6), pos))
    assert torch.equal(vc[slots], heads[:, 40:])


def test_qkv_slices_summed_by_rope_give_the_products_bits(monkeypatch):
    """triton_gemm.QKV_SLICES_TO_ROPE (staged) with the 4B qkv product at split-K 2: 1 and 8 rows (a Gluon launch
    leaving its slices to the RoPE kernel) give q, keys and values bit for bit what 24 rows give (the Triton
    kernel, its last program summing the slices) and what the product's own finish gives."""
    from sparkdec.ops import triton_fused as tf
    from sparkdec.ops import triton_gemm as tg
    from sparkdec.ops.partials import Partials
    from sparkdec.ops.rope import RotaryTable

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    monkeypatch.setitem(tg.CONFIGS, (6144, 2560), (64, 128, 2, 4, 4))
    w = (torch.randn(6144, 2560, device=dev) * 0.02).to(dt)
    x = torch.randn(24, 2560, device=dev, dtype=dt)
    rope = RotaryTable(128, 1e6, 4096, dev)
    wq, wk = torch.randn(128, device=dev, dtype=dt), torch.randn(128, device=dev, dtype=dt)
    pos, slots = torch.arange(100, 124, device=dev), torch.arange(24, device=dev)

    def rows(m, slices):
        monkeypatch.setattr(tg, "QKV_SLICES_TO_ROPE", slices)
        qkv = tg.gemm(x[:m], w, partial=tg.QKV_SLICES_TO_ROPE)
        assert isinstance(qkv, Partials) == (slices and m <= 16)
        kc, vc = torch.zeros(24, 8, 128, device=dev, dtype=dt), torch.zeros(24, 8, 128, device=dev, dtype=dt)
        q = tf.qkv_rope_store(qkv, 32, 8, wq, wk, 1e-6, rope.cos, rope.sin, pos[:m], slots[:m], kc, vc)
        return q, kc[:m], vc[:m]

    want = rows(24, False)
    for m in (1, 8):
        for slices in (True, False):
            assert all(torch.equal(a, b[:m]) for a, b in zip(rows(m, slices), want)), (m, slices)


def test_gemm_rows_are_batch_invariant_and_close_to_cublas():
    """Every variant (plain, SiLU, residual; with and without split-K): a row's bits do not depend
    on M, and the product is close to cuBLAS in float32."""
    from sparkdec.ops import triton_gemm as tg

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    saved = dict(tg.CONFIGS)
    try:
        for n, k, cfg in [(6144, 2560, None), (2560, 4096, (32, 128, 4, 4, 4)), (2560, 9728, (16, 256, 2, 4, 3)),
                          (151936, 2560, None), (509, 24, None), (19456, 2560, (64, 128, 2, 4, 4))]:
            if cfg:
                tg.CONFIGS[(n, k)] = cfg
            w, x = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5, torch.randn(300, k, device=dev, dtype=dt)
            r = torch.randn(300, n, device=dev, dtype=dt)
            variants = {"plain": {}, "residual": {"residual": r}, "silu": {"silu": True}}
            for name, kw in variants.items():
                full = tg.gemm(x, w, **kw)
                for m in (1, 2, 7, 16, 17, 64, 129):
                    kw_m = {**kw, "residual": r[:m]} if "residual" in kw else kw
                    assert torch.equal(tg.gemm(x[:m], w, **kw_m), full[:m]), (n, k, name, m)
            ref = torch.nn.functional.linear(x.float(), w.float())
            got = tg.gemm(x, w).float()
            assert (got - ref).abs().max() <= 2e-2 * ref.abs().max(), (n, k)
        assert int(tg._COUNTERS[torch.device("cuda", 0)].abs().sum()) == 0
    finally:
        tg.CONFIGS.clear()
        tg.CONFIGS.update(saved)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="Hopper")
def test_gluon_products_give_the_triton_kernels_bits():
    """The Gluon product (the shipped tiles of the Qwen3-4B products; x in the ring or loaded whole) against the
    Triton kernel: same bits for 1..16 rows, plain / SiLU / residual, a strided x, float32 output; the Gluon path
    really runs (its table names the shape)."""
    from sparkdec.ops import gluon_gemv as gg
    from sparkdec.ops import triton_gemm as tg

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    saved = dict(gg.CONFIGS)
    try:
        # the four layer products, the drafter's fc and its k/v rows (a row slice of a qkv weight, as the engine reads)
        for n, k in [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728), (2560, 12800), (2048, 2560)]:
            cfg = saved[(n, k)]
            w = torch.randn(n + 4096 if n == 2048 else n, k, device=dev, dtype=dt)[-n:] / k ** 0.5
            x = torch.randn(16, k + 64, device=dev, dtype=dt)[:, 32:32 + k]  # rows strided, 64-byte offset
            r = torch.randn(16, n, device=dev, dtype=dt)
            tiles = [tuple(cfg)] + ([(cfg[0], cfg[1], cfg[2], 1 - cfg[3])] if n == 6144 else [])
            for tile in tiles:
                gg.CONFIGS[(n, k)] = tile
                for kw in ({}, {"silu": True}, {"residual": r}, {"out_dtype": torch.float32}):
                    for m in (1, 8, 9, 16):
                        kw_m = {**kw, "residual": r[:m]} if "residual" in kw else kw
                        assert gg.supports(x[:m], w, 1) is not None
                        got = tg.gemm(x[:m], w, **kw_m)
                        tg.GLUON = False
                        ref = tg.gemm(x[:m], w, **kw_m)
                        tg.GLUON = True
                        assert torch.equal(got, ref), (n, k, tile, kw.keys(), m)
        assert int(tg._COUNTERS[torch.device("cuda", 0)].abs().sum()) == 0
    finally:
        tg.GLUON = True
        gg.CONFIGS.clear()
        gg.CONFIGS.update(saved)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="Hopper")
def test_tiled_weights_give_the_row_major_bits():
    """ops/tiled_weights.py: the products the engine stores tile by tile (gluon_gemv.TILED_SHAPES) give the row-major
    weights' bits in the Gluon product (1-16 rows: it runs them) and the Triton kernel (17-300 rows), plain, SiLU and
    with a residual."""
    from sparkdec.ops import gluon_gemv as gg
    from sparkdec.ops import triton_gemm as tg
    from sparkdec.ops.tiled_weights import set_tiled_, tiles_of

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    for n, k in sorted(gg.TILED_SHAPES):
        w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
        x = torch.randn(300, k, device=dev, dtype=dt)
        r = torch.randn(300, n, device=dev, dtype=dt)
        kws = [{}, {"silu": True}, {"residual": r}]
        rows = (1, 8, 16, 17, 64, 300)
        want = {(m, i): tg.gemm(x[:m], w, **({"residual": r[:m]} if "residual" in kw else kw))
                for m in rows for i, kw in enumerate(kws)}
        set_tiled_(w, gg.tiles_for(w))
        assert tiles_of(w) is not None, (n, k)
        for (m, i), ref in want.items():
            kw = {"residual": r[:m]} if "residual" in kws[i] else kws[i]
            assert (gg.supports(x[:m], w, tg.split_k_of(n, k)) is not None) == (m <= 16)
            assert torch.equal(tg.gemm(x[:m], w, **kw), ref), (n, k, m, kws[i].keys())


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="Hopper")
def test_engines_with_tiled_weights_decode_the_row_major_tokens(monkeypatch):
    """A two-layer Qwen3-4B-shaped target (and a drafter of the released shape over its two layers): the engine
    stores o, gate_up and down tile by tile; its greedy tokens (CUDA graphs, 1k-token prompt) equal those of an
    engine that keeps them row-major on the same model (tiles undone in place), and speculative greedy equals
    plain; the model's row_major_state_dict still gives its weights' values. The drafter's layers are tiled too
    (gluon_gemv.TILED_DRAFTER, shipped on); GPU_TILED_DRAFTER=0 keeps them row-major."""
    import os
    from dataclasses import replace

    from sparkdec.bench import kernels as bk
    from sparkdec.bench import shapes
    from sparkdec.ops import gluon_gemv as gg
    from sparkdec.ops.tiled_weights import tiles_of

    cfg = replace(shapes.SHAPES["qwen3-4b"], num_hidden_layers=2)
    monkeypatch.setitem(shapes.SHAPES, "qwen3-4b-2l", cfg)
    draft_of = shapes.released_draft_config
    monkeypatch.setattr(shapes, "released_draft_config",
                        lambda c: replace(draft_of(c), num_target_layers=2, target_layer_ids=(0, 1)))
    drafter_tiled = os.environ.get("GPU_TILED_DRAFTER", "1") == "1"
    monkeypatch.setattr(gg, "TILED_DRAFTER", drafter_tiled)
    models = shapes.random_models("qwen3-4b-2l")
    before = {name: t.clone() for name, t in models[0].state_dict().items()}

    def greedy(spec: bool) -> list[int]:
        eng = bk.make_engine(models, 1024, spec=spec)
        seq = bk.prefill(eng, 1024, 48, seed=3)
        while not seq.finished:
            eng.step()
        return list(seq.output_ids)

    def tiled_ones(layer) -> list[bool]:
        return [tiles_of(w) is not None for w in layer.tileable_weights()]

    tiled = greedy(False)
    layer = models[0].model.layers[0]
    shipped = [tuple(w.shape) in gg.TILED_SHAPES for w in layer.tileable_weights()]
    assert tiled_ones(layer) == shipped and sum(shipped) == 3  # o, down, gate_up (not qkv)
    assert greedy(True) == tiled
    assert tiled_ones(models[2].layers[0]) == [drafter_tiled and s for s in shipped]
    after = models[0].row_major_state_dict()
    assert all(torch.equal(after[name], t) for name, t in before.items())
    monkeypatch.setattr(gg, "TILED_SHAPES", set())
    assert greedy(False) == tiled
    assert not any(tiled_ones(layer))


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="Hopper")
def test_paced_fill_gives_the_same_bits():
    """gluon_gemv.PACED (the ring's tiles before the PDL wait requested one or two at a time, each stage's weight
    arrival a plain arrive), with gluon_gemv.LONE_ROW_STAGES' shallower rings: the four Qwen3-4B layer products,
    1..16 rows, with and without a residual, give the Triton kernel's bits, three launches back to back."""
    from sparkdec.ops import gluon_gemv as gg
    from sparkdec.ops import triton_gemm as tg

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    shapes = [(6144, 2560), (2560, 4096), (19456, 2560), (2560, 9728)]
    saved, saved_rows = dict(gg.PACED), gg.PACED_ROWS
    try:
        gg.PACED_ROWS = 16
        for n, k in shapes:
            gg.PACED[(n, k)] = 1 if n != 2560 else 2
            gg.LONE_ROW_STAGES[(n, k)] = 3 if n != 2560 else 2
            w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
            x = torch.randn(16, k, device=dev, dtype=dt)
            r = torch.randn(16, n, device=dev, dtype=dt)
            for m in (1, 8, 16):
                for kw in ({}, {"residual": r[:m]}):
                    assert gg.supports(x[:m], w, 1) is not None
                    got = [tg.gemm(x[:m], w, **kw) for _ in range(3)]
                    tg.GLUON = False
                    ref = tg.gemm(x[:m], w, **kw)
                    tg.GLUON = True
                    assert all(torch.equal(g, ref) for g in got), (n, k, m, kw.keys())
    finally:
        tg.GLUON = True
        gg.PACED.clear()
        gg.PACED.update(saved)
        gg.PACED_ROWS = saved_rows
        gg.LONE_ROW_STAGES.clear()


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0), reason="Hopper")
def test_split_k_slices_summed_by_the_norm_give_the_same_bits():
    """triton_gemm.SUM_IN_NORM: the o and down products leave their slices to the next RMSNorm kernel
    (ops/partials.py). Two Qwen3-4B-shaped layers, 1 and 8 rows: the same final hidden states and taps, bit for
    bit, as the products summing their own slices; and the layers really hand slices on."""
    from dataclasses import replace

    from sparkdec.bench.shapes import SHAPES
    from sparkdec.engine.context import build_context
    from sparkdec.models.qwen3 import Qwen3ForCausalLM
    from sparkdec.ops import triton_gemm as tg
    from sparkdec.ops.partials import Partials

    from sparkdec.ops.triton_fused import norm_of, rms_norm

    # one product + norm, many rows: norm_of's output and h against the product summing its slices, then rms_norm
    # (a different reduction layout in the norm flips a few rows' bf16 roundings, which two layers can miss)
    dev, dt = "cuda", torch.bfloat16
    saved = tg.SUM_IN_NORM
    try:
        for n, k in [(2560, 4096), (2560, 9728)]:
            w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
            nw = 1 + 0.1 * torch.randn(n, device=dev, dtype=dt)
            for seed in range(12):
                torch.manual_seed(seed)
                x, r = torch.randn(16, k, device=dev, dtype=dt), torch.randn(16, n, device=dev, dtype=dt)
                for m in (1, 8, 16):
                    tg.SUM_IN_NORM = False
                    h_ref = tg.gemm(x[:m], w, residual=r[:m], partial=True)
                    tg.SUM_IN_NORM = True
                    part = tg.gemm(x[:m], w, residual=r[:m], partial=True)
                    assert isinstance(part, Partials)
                    got, h = norm_of(part, nw, 1e-6)
                    assert torch.equal(h, h_ref) and torch.equal(got, rms_norm(h_ref, nw, 1e-6)), (n, seed, m)
    finally:
        tg.SUM_IN_NORM = saved
    cfg = replace(SHAPES["qwen3-4b"], num_hidden_layers=2, vocab_size=512)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.02)
    model = model.to("cuda", torch.bfloat16)
    for layer in model.model.layers:
        layer.fuse()
    model.setup_rope(512, "cuda")
    ps, pages = 16, 32
    saved = tg.SUM_IN_NORM
    try:
        for rows in (1, 8):
            ctx = build_context([(list(range(pages)), list(range(300, 300 + rows)), False)], ps, "cuda")
            ids = torch.randint(0, cfg.vocab_size, (rows,), device="cuda")
            runs = []
            for on in (False, True):
                tg.SUM_IN_NORM = on
                kv = [tuple(torch.randn(pages * ps, cfg.num_key_value_heads, cfg.head_dim, device="cuda",
                                        dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(i))
                            for _ in range(2)) for i in range(2)]
                with torch.no_grad():
                    runs.append(model(ids, ctx, kv, tap_layers=(0, 1)))
                    h = model.model.embed_tokens(ids)
                    assert isinstance(model.model.layers[0](h, ctx, kv[0], model.rope), Partials) == on
            (h0, t0), (h1, t1) = runs
            assert torch.equal(h0, h1) and torch.equal(t0, t1), rows
    finally:
        tg.SUM_IN_NORM = saved


@pytest.mark.parametrize("kw", [dict(temperature=0.8), dict(temperature=0.8, top_p=0.95),
                                dict(temperature=0.7, top_k=100, top_p=0.9)])
def test_sample_rows_gives_each_row_what_one_row_gives_on_cuda(kw):
    """A round's rows drawn in one batch (sampling.sample_rows, draw_tokens) equal rows drawn one at a time: the
    CUDA softmax, sort and cumsum of a row do not depend on how many rows share the call."""
    from sparkdec.sampling import draw_tokens, sample_rows, sample_token

    torch.manual_seed(0)
    x = torch.randn(8, 151936, device="cuda") * 4
    p = SamplingParams(**kw)
    one = [sample_token(x[r], p, 99, 1000 + r) for r in range(8)]
    assert sample_rows(x, p, 99, 1000).tolist() == one
    draws = [(p, 99, 1000 + r) for r in range(8)]
    assert draw_tokens(x, draws).tolist() == one  # every row sampling with one filter: one race, no gather
    draws[3] = (SamplingParams(), 0, 0)  # a greedy row among them
    assert draw_tokens(x, draws).tolist() == one[:3] + [int(x[3].argmax())] + one[4:]


@pytest.mark.parametrize("kw", [dict(temperature=0.8, top_p=0.95), dict(temperature=1.3, top_k=50),
                                dict(temperature=0.7, top_k=40, top_p=0.9), dict(temperature=1.0)])
def test_sampler_graphs_replay_the_eager_race(kw):
    """engine/sampler_graphs.py: the race captured over a static logits buffer [8, V], replayed with new logits in it,
    other live rows (views at offsets) and new keys, gives kernel_race's tokens; a step's tokens survive the next
    replay; two forms replayed in turn (one pool) keep theirs."""
    from sparkdec.engine.sampler_graphs import SamplerGraphs
    from sparkdec.sampling import kernel_race

    graphs, p, q = SamplerGraphs(), SamplingParams(**kw), SamplingParams(temperature=0.9, top_p=0.8)
    whole = torch.empty(8, 151936, device="cuda")
    before = None
    for step, (lo, n) in enumerate([(0, 1), (0, 8), (0, 1), (3, 4), (7, 1), (0, 8), (2, 5)]):
        torch.manual_seed(step)
        whole.copy_(torch.randn(8, 151936, device="cuda") * 4)
        for params in (p, q):  # (A, B, A, B: both forms in the one pool)
            keys = [step * 100 + r for r in range(n)]
            got = graphs.race(whole[lo:lo + n], params, keys, whole)
            want = kernel_race(whole[lo:lo + n], params, keys).tolist()
            assert (got is None) == (step == 0) and (got is None or got.tolist() == want)
            if before is not None:
                assert before[0].tolist() == before[1]
            before = (got, want) if got is not None else None
    assert graphs.captures == 2


def test_sampler_graphs_keep_their_counters_and_evict():
    """A graph keeps the arrival counters it was captured with when a larger eager race replaces them (over 64 rows),
    and past MAX_GRAPHS the oldest form goes and is captured again on its next uses."""
    from sparkdec.engine import sampler_graphs
    from sparkdec.sampling import kernel_race

    graphs, p = sampler_graphs.SamplerGraphs(), SamplingParams(temperature=0.8, top_p=0.95)
    whole, big = torch.randn(8, 151936, device="cuda") * 4, torch.randn(100, 151936, device="cuda") * 4
    keys = list(range(8))
    for _ in range(2):
        graphs.race(whole, p, keys, whole)
    kernel_race(big, p, list(range(100)))  # (ops/triton_nucleus.arrivals_for: a new, larger buffer)
    assert graphs.race(whole, p, keys, whole).tolist() == kernel_race(whole, p, keys).tolist()
    old, sampler_graphs.MAX_GRAPHS = sampler_graphs.MAX_GRAPHS, 1
    try:
        other = SamplingParams(temperature=0.5)
        for _ in range(2):
            graphs.race(whole, other, keys, whole)
        assert len(graphs.graphs) == 1 and graphs.captures == 2
        for _ in range(2):
            got = graphs.race(whole, p, keys, whole)
        assert graphs.captures == 3 and got.tolist() == kernel_race(whole, p, keys).tolist()
    finally:
        sampler_graphs.MAX_GRAPHS = old


def test_staged_copies_arrive_intact_through_the_ring():
    """sparkdec/staging.py: pinned buffers reused in turn (more copies than buffers, shapes kept, a large copy)."""
    from sparkdec import staging

    outs = [(v, staging.to_device([[v, v + 1, v + 2], [7, 8, 9]], "cuda")) for v in range(3 * staging.RING)]
    big = list(range(staging.CAPACITY + 5))
    assert staging.to_device(big, "cuda").tolist() == big
    assert all(t.tolist() == [[v, v + 1, v + 2], [7, 8, 9]] for v, t in outs)


def test_keyed_noise_is_identical_on_cuda_and_cpu():
    from sparkdec.sampling import uniform_noise

    assert torch.equal(uniform_noise(7, 123, 0, 151936, "cuda").cpu(), uniform_noise(7, 123, 0, 151936, "cpu"))


def test_fused_markov_step_matches_reference_chain():
    from sparkdec.ops.triton_markov import markov_step

    torch.manual_seed(0)
    b, v, r, gamma = 3, 151936, 256, 7
    w1 = torch.randn(v, r, device="cuda", dtype=torch.bfloat16)
    w2 = torch.randn(v, r, device="cuda", dtype=torch.bfloat16) / 16
    u = torch.randn(b, gamma, v, device="cuda")
    prev, ref_prev = torch.tensor([1, 7, 151935], device="cuda"), torch.tensor([1, 7, 151935], device="cuda")
    drafts, z = torch.empty(b, gamma, dtype=torch.long, device="cuda"), torch.empty(b, gamma, v, device="cuda")
    from sparkdec.ops.linear import linear

    for k in range(gamma):
        ref_z = u[:, k] + torch.nn.functional.linear(w1[ref_prev], w2).float()
        engine_z = u[:, k] + linear(w1[ref_prev], w2).float()  # the reference chain's own product
        markov_step(prev, w1, w2, u[:, k], z[:, k], drafts[:, k])
        assert torch.allclose(z[:, k], ref_z, rtol=2e-2, atol=2e-2)
        assert torch.equal(z[:, k], engine_z)  # same bits as the unfused (sampled-path) chain
        assert torch.equal(drafts[:, k], z[:, k].argmax(-1))  # the pick is exactly the argmax of its own z
        ref_prev = drafts[:, k].clone()
    from sparkdec.ops import triton_markov

    for programs in (132, 264, 2000):  # the whole chain (partials reduced by the next slot): the same z and drafts
        triton_markov.CHAIN_PROGRAMS = programs
        z2, drafts2 = torch.empty_like(z), torch.empty_like(drafts)
        triton_markov.markov_chain(torch.tensor([1, 7, 151935], device="cuda"), w1, w2, u, z2, drafts2)
        assert torch.equal(z2, z) and torch.equal(drafts2, drafts), programs
    triton_markov.CHAIN_PROGRAMS = 264
    tail_drafts = torch.full_like(drafts, -1)  # the last draft reduced by the confidence kernel instead
    tail = triton_markov.markov_chain(torch.tensor([1, 7, 151935], device="cuda"), w1, w2, u, z2, tail_drafts,
                                      finish=False)
    from sparkdec.ops.triton_propose import confidences

    confidences(torch.randn(b, gamma, 64, device="cuda"), None, torch.tensor([1, 7, 151935], device="cuda"),
                tail_drafts, torch.randn(1, 64, device="cuda"), torch.randn(1, device="cuda"), tail)
    assert torch.equal(tail_drafts, drafts)


def test_propose_kernels_and_float_logits_match_torch_on_cuda():
    """The block embedding and confidence kernels against the torch path, and float32 logits from the product's
    own epilogue bit-equal to the bf16 product converted."""
    from sparkdec.models.dspark import ConfidenceHead
    from sparkdec.ops.triton_gemm import gemm
    from sparkdec.ops.triton_propose import block_embed, confidences

    torch.manual_seed(0)
    v, d, r, gamma = 151936, 2560, 256, 7
    table = torch.randn(v, d, device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn(v, r, device="cuda", dtype=torch.bfloat16)
    anchors = torch.tensor([3, v - 1], device="cuda")
    drafts = torch.randint(0, v, (2, gamma), device="cuda")
    ids = torch.full((2, gamma), 151669, device="cuda")
    ids[:, 0] = anchors
    assert torch.equal(block_embed(table, anchors, gamma, 151669), table[ids.view(-1)])
    h = torch.randn(2, gamma, d, device="cuda", dtype=torch.bfloat16)
    head = ConfidenceHead(d + r).to("cuda", torch.bfloat16)
    es = w1[torch.cat([anchors[:, None], drafts[:, :-1]], 1)]
    got = confidences(h, w1, anchors, drafts, head.proj.weight, head.proj.bias)
    assert torch.allclose(got, head(h, es), atol=1e-4)
    x = torch.randn(7, d, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(gemm(x, table, out_dtype=torch.float32), gemm(x, table).float())


def test_eager_attention_in_row_ranges_equals_one_call():
    """A long eager chunk split into row ranges (workspace budget) gives the same bits as one call."""
    import sparkdec.ops.triton_attention as ta
    from sparkdec.engine.context import build_context

    torch.manual_seed(0)
    ps, hq, hkv, d = 16, 32, 8, 128
    kc = torch.randn(300 * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn(300 * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    ctx = build_context([(list(range(300)), list(range(3000, 3600)), False)], ps, "cuda")
    q = torch.randn(ctx.num_tokens, hq, d, device="cuda", dtype=torch.bfloat16)
    args = (q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, ctx.max_kv_len, d ** -0.5)
    whole = ta.triton_paged_attention(*args)
    saved = ta.WORKSPACE_BYTES
    try:
        ta.WORKSPACE_BYTES = 1 << 20
        assert torch.equal(ta.triton_paged_attention(*args, row_kv_len_host=ctx.row_kv_len_host), whole)
    finally:
        ta.WORKSPACE_BYTES = saved


def _attention_case(hq: int, hkv: int, ps: int = 16, d: int = 128):
    """Random bf16 caches and queries for four sequences: a 40-row causal run past 2048 keys (coarse splits, a
    block that continues another), an 8-row drafter block, a lone row, an 8-row verify block -> (q, caches, ctx)."""
    from sparkdec.engine.context import build_context

    torch.manual_seed(0)
    kc = torch.randn(300 * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn(300 * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    rows = [(list(range(300)), list(range(3000, 3040)), False), (list(range(300)), list(range(500, 508)), True),
            (list(range(300)), [7], False), (list(range(300)), list(range(1000, 1008)), False)]
    ctx = build_context(rows, ps, "cuda")
    return torch.randn(ctx.num_tokens, hq, d, device="cuda", dtype=torch.bfloat16), kc, vc, ctx


def test_attention_rows_in_blocks_equal_rows_alone():
    """Rows sharing key/value loads in a row block (verify, prefill, drafter block) give the bits each row gets
    alone (decode): the property that keeps speculative greedy output equal to plain greedy output."""
    import sparkdec.ops.triton_attention as ta

    ps, d = 16, 128
    q, kc, vc, ctx = _attention_case(32, 8)
    args = (q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, ctx.max_kv_len, d ** -0.5)
    grouped = ta.triton_paged_attention(*args, blocks=(ctx.block_lead, ctx.block_rows))
    for r in range(ctx.num_tokens):  # one row per call: the smallest query tile
        one = (q[r:r + 1], kc, vc, ctx.block_tables, ctx.row_seq[r:r + 1], ctx.row_kv_len[r:r + 1], ps,
               ctx.max_kv_len, d ** -0.5)
        assert torch.equal(ta.triton_paged_attention(*one), grouped[r:r + 1]), r
    saved = ta.COMBINE_UNROLL
    try:  # the combine's chunk loops unrolled or not: the same operations, the same bits
        ta.COMBINE_UNROLL = not saved
        assert torch.equal(ta.triton_paged_attention(*args, blocks=(ctx.block_lead, ctx.block_rows)), grouped)
    finally:
        ta.COMBINE_UNROLL = saved


def test_persistent_mlp_gives_the_two_products_bits():
    """ops/gluon_mlp.py (staged in session 11): gate_up + SiLU -> down + residual in one persistent launch gives the
    two products' bits for 1-16 rows, launch after launch (the launch leaves its counters at zero)."""
    from sparkdec.ops import gluon_mlp
    from sparkdec.ops import triton_gemm as tg
    from sparkdec.ops.triton_fused import norm_of, rms_norm

    if not gluon_mlp.gg.AVAILABLE or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon path runs on sm_90 with triton 3.6")
    torch.manual_seed(0)
    hid, inter = 2560, 9728
    bf = dict(device="cuda", dtype=torch.bfloat16)
    w_gu, w_dn = torch.randn(2 * inter, hid, **bf) / hid ** 0.5, torch.randn(hid, inter, **bf) / inter ** 0.5
    h, norm = torch.randn(16, hid, **bf), (1 + 0.1 * torch.randn(hid, **bf), 1e-6)
    saved = tg.FUSED_MLP
    try:
        for m in (1, 5, 8, 9, 16):
            tg.FUSED_MLP = False
            want = norm_of(tg.mlp(h[:m], w_gu, w_dn, norm), *norm)[1]  # summed here if SUM_IN_NORM left slices
            tg.FUSED_MLP = True
            x = rms_norm(h[:m], *norm)
            assert gluon_mlp.supports(x, w_gu, w_dn, tg.split_k_of(*w_gu.shape), tg.split_k_of(*w_dn.shape))
            for _ in range(3):
                assert torch.equal(tg.mlp(h[:m], w_gu, w_dn, norm), want), m
            assert int(gluon_mlp._state(h.device).abs().sum()) == 0
    finally:
        tg.FUSED_MLP = saved


def test_prompt_rows_do_not_depend_on_chunking():
    """Prompt rows (prefill kernel, one pass over the keys) get the same bits whether the prompt is prefilled in
    one chunk or in several, and next to generated rows (split kernel) or not."""
    from sparkdec.engine.context import build_context
    from sparkdec.ops.attention import paged_attention

    torch.manual_seed(0)
    ps, hq, hkv, d = 16, 32, 8, 128
    kc = torch.randn(300 * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn(300 * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    table = list(range(100))
    q = torch.randn(900, hq, d, device="cuda", dtype=torch.bfloat16)
    whole = paged_attention(q, kc, vc, build_context([(table, list(range(900)), False)], ps, "cuda", 0), d ** -0.5)
    parts = [paged_attention(q[a:b], kc, vc, build_context([(table, list(range(a, b)), False)], ps, "cuda", 0), d ** -0.5)
             for a, b in [(0, 250), (250, 251), (251, 900)]]
    assert torch.equal(torch.cat(parts), whole)
    gen = torch.randn(3, hq, d, device="cuda", dtype=torch.bfloat16)  # generated rows of other sequences first
    rows = [(list(range(100, 200)), [1000], False), (list(range(200, 300)), [40, 41], False), (table, list(range(251, 900)), False)]
    mixed = paged_attention(torch.cat([gen, q[251:]]), kc, vc, build_context(rows, ps, "cuda", 2), d ** -0.5)
    assert torch.equal(mixed[3:], whole[251:])



def test_lookahead_equals_ordinary_rounds_with_graphs(target):
    """Plain decoding one step ahead (engine/lookahead.py, graphs, double-buffered staging, device-fed inputs, sampled
    rows drawn on the device) emits the tokens of the ordinary synchronous round, with sequences of different
    lengths."""
    params = [SamplingParams(max_tokens=40 + 50 * i, ignore_eos=True) for i in range(len(PROMPTS))]
    params[1] = SamplingParams(max_tokens=120, ignore_eos=True, temperature=0.8, top_p=0.95, seed=3)  # drawn on the device
    params[2] = SamplingParams(max_tokens=100, ignore_eos=True, temperature=0.8, top_p=0.95, seed=4)
    ahead = LLM(model=str(target), device="cuda", dtype="bfloat16").generate(PROMPTS, params)
    plain = LLM(model=str(target), device="cuda", dtype="bfloat16", lookahead=False).generate(PROMPTS, params)
    assert [o.token_ids for o in ahead] == [o.token_ids for o in plain]


def test_bf16_logprobs_equal_with_speculation_on_and_off():
    """Output and prompt log-probabilities (spec/logprobs.py) from verify rows equal plain decoding's rows, bit for
    bit, greedy and sampled (tiny pair, bf16, graphs)."""
    prompts = ["def parse(line):\n", "import os\nimport sys\n"]
    params = [SamplingParams(max_tokens=120, ignore_eos=True, logprobs=3, prompt_logprobs=2),
              SamplingParams(max_tokens=120, ignore_eos=True, temperature=0.8, seed=5, logprobs=3)]
    runs = [[(o.token_ids, o.logprobs, o.prompt_logprobs) for o in
             LLM(device="cuda", dtype="bfloat16", speculative=spec).generate(prompts, params)] for spec in (True, False)]
    assert runs[0] == runs[1]
    assert all(len(lp) == 120 for _, lp, _ in runs[0])


def test_bf16_logit_processing_equal_with_speculation_on_and_off():
    """Penalties, logit_bias, min_p, bad words and min_tokens (sparkdec/penalties.py, processed on the device in one
    pass) on graphed bf16 verify rows, each processed with the drafts before it, give plain decoding's tokens (one
    step ahead), greedy and sampled, next to requests that process nothing."""
    prompts = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n", "def parse(line):\n"]
    params = [SamplingParams(max_tokens=120, ignore_eos=True, repetition_penalty=1.2, logit_bias={13: 1.5}),
              SamplingParams(max_tokens=120, ignore_eos=True, temperature=0.8, seed=5, min_p=0.05,
                             presence_penalty=0.6, frequency_penalty=0.3),
              SamplingParams(max_tokens=120, ignore_eos=True),
              SamplingParams(max_tokens=120, ignore_eos=True, bad_words=["line", "Parse a"], min_tokens=30)]
    from sparkdec.spec import processed

    runs = [[o.token_ids for o in LLM(device="cuda", dtype="bfloat16", speculative=spec).generate(prompts, params)]
            for spec in (True, False)]
    assert runs[0] == runs[1]
    processed.DEVICE_PROCESSING = False  # the reference: rows processed after the read
    try:
        after = LLM(device="cuda", dtype="bfloat16").generate(prompts, params)
    finally:
        processed.DEVICE_PROCESSING = True
    assert [o.token_ids for o in after] == runs[0]


def test_a_top_k_check_passes_only_where_the_kernel_sampler_draws_the_same_masked():
    """spec/processed.kept_ids against the CUDA kernel sampler (ops/triton_nucleus.py, whose cut divides with div_rn
    where torch multiplies by 1 / T): float32 rows whose third value sits 0-7 ulps below the second (top-k 2), that
    id refused, top-p splitting the kept: wherever the check passes, the masked row draws the same token."""
    from sparkdec.sampling import kernel_race
    from sparkdec.spec import processed

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, vocab, inf = 256, 4096, float("inf")
    allowed = torch.ones(vocab, dtype=torch.bool, device="cuda")
    allowed[2] = False
    passed = 0
    for temperature in (0.6, 0.7, 1.3):
        params = SamplingParams(temperature=temperature, top_k=2, top_p=0.45)
        x = torch.randn(rows, vocab, device="cuda", generator=gen)
        x[:, 1] = 6.0 + torch.rand(rows, device="cuda", generator=gen)  # (the k-th)
        x[:, 0] = x[:, 1] + 0.3 * temperature
        x[:, 2] = x[:, 1]
        for r in range(rows):  # (the next, refused: r % 8 ulps below the k-th)
            for _ in range(r % 8):
                x[r, 2] = torch.nextafter(x[r, 2], torch.tensor(-inf, device="cuda"))
        keys = list(range(rows))
        unmasked = kernel_race(x, params, keys)
        masked = kernel_race(x.masked_fill(~allowed, -inf), params, keys)
        kept = processed.kept_ids(x, params).long()
        ok = (kept >= 0).all(-1) & allowed[kept.clamp(min=0)].all(-1)
        assert torch.equal(unmasked[ok], masked[ok]), temperature
        passed += int(ok.sum())
    assert passed > rows


def test_bf16_guided_decoding_equal_with_speculation_on_and_off():
    """Guided decoding (sparkdec/guided.py: JSON schema, regex, choice, a regex after a thinking block the prompt
    opened) masks graphed bf16 verify rows after the drafts before them, on the device before the round's one read
    (processed.GUIDED_ON_DEVICE), or checks greedy rows' tokens, and a top-k draw's kept ids, after it (GUIDED_CHECKED,
    FILTERED_CHECKED; plain decoding one step ahead, the top-k one too): plain decoding's tokens
    and those of every row masked, before the read or after it, greedy and sampled, and the outputs follow their
    guides."""
    pytest.importorskip("xgrammar")
    from sparkdec.guided import Guided

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "line": {"type": "integer", "minimum": 0, "maximum": 999}},
              "required": ["name", "line"]}
    prompts = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n", "def add(a, b):", "def main():\n"]
    params = [SamplingParams(max_tokens=160, guided=Guided(json=schema, any_whitespace=False)),
              SamplingParams(max_tokens=160, temperature=0.8, seed=5, guided=Guided(regex=r"[a-z_]{1,12}\(\d{1,3}\)")),
              SamplingParams(max_tokens=20, guided=Guided(choice=("yes", "no"))),
              SamplingParams(max_tokens=90, guided=Guided(regex=r" [0-9]{1,4}", thinking=("):", "Ġ="))),  # (opened)
              SamplingParams(max_tokens=120, temperature=0.8, top_k=20, top_p=0.9, seed=6,  # (checked: its top-k)
                             guided=Guided(regex=r"[ -~\n]{1,300}"))]
    runs = [LLM(device="cuda", dtype="bfloat16", speculative=spec).generate(prompts, params) for spec in (True, False)]
    assert [o.token_ids for o in runs[0]] == [o.token_ids for o in runs[1]]
    assert set(json.loads(runs[0][0].text)) == {"name", "line"} and runs[0][2].text in ("yes", "no")
    assert re.fullmatch(r"\n*" + r" [0-9]{1,4}", runs[0][3].text.partition(" =")[2]), runs[0][3].text
    from sparkdec.spec import processed

    # the references: greedy rows masked too (not checked after the read: processed.GUIDED_CHECKED), before the read
    # and after it (its masks made the same way)
    for on_device in (True, False):
        processed.GUIDED_ON_DEVICE, processed.GUIDED_CHECKED = on_device, False
        try:
            masked = LLM(device="cuda", dtype="bfloat16").generate(prompts, params)
        finally:
            processed.GUIDED_ON_DEVICE, processed.GUIDED_CHECKED = True, True
        assert [o.token_ids for o in masked] == [o.token_ids for o in runs[0]]


def test_prefix_cache_gives_the_cold_cache_tokens_with_graphs():
    """Prompts that begin with cached prompt pages (engine/prefix_cache.py) start their prefill after them and emit
    the tokens a cold cache gives, bit for bit: prompt rows do not depend on chunking (tiny pair, bf16, graphs)."""
    system = "You are a careful Python programmer. Answer with code only, no prose, and keep names short.\n" * 3
    prompts = [system + q for q in ("def parse(line):\n", "import os\n", "class Config:\n", "def parse(line):\n")]
    params = SamplingParams(max_tokens=100, ignore_eos=True)
    runs = []
    for caching in (False, True):
        llm = LLM(device="cuda", dtype="bfloat16", prefix_caching=caching)
        runs.append([(o.token_ids, o.stats["rounds"]) for p in prompts for o in llm.generate([p], params)])
        assert (llm.engine.scheduler.prefix_hits > 0) == caching
    assert runs[0] == runs[1]


@pytest.mark.parametrize("speculative", [True, False])
def test_preempted_requests_keep_their_tokens_with_graphs(speculative):
    """A KV cache too small for every request's whole life preempts the newest (engine/scheduler.py): they
    recompute their prompt with the prefill kernel and their generated rows with the split kernel, as they were
    first computed, so greedy and sampled tokens equal a large cache's, bit for bit (tiny pair, bf16, graphs)."""
    prompts = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n    def __init__(self, path):\n",
               "The standard library provides", "for key, value in items:\n", "This module defines functions for"]
    params = [SamplingParams(max_tokens=160, ignore_eos=True, temperature=0.8 * (i % 2), seed=i, logprobs=1)
              for i in range(len(prompts))]
    outs, preemptions = [], []
    for small in (False, True):
        llm = LLM(device="cuda", dtype="bfloat16", speculative=speculative,
                  **(dict(kv_cache_tokens=30 * 16, page_size=16) if small else {}))
        outs.append([(o.token_ids, o.logprobs) for o in llm.generate(prompts, params)])
        preemptions.append(llm.engine.scheduler.num_preemptions)
    assert preemptions[0] == 0 and preemptions[1] > 0
    assert outs[0] == outs[1]


@pytest.mark.parametrize("device_draws", [True, False])
def test_propose_queued_ahead_matches_ordinary_rounds_with_graphs(device_draws, monkeypatch):
    """Greedy speculative rounds with the next propose staged on the device and queued before the readback
    (spec/chain.py, ProposeGraphs.run_chained: one staging kernel) draft, verify and accept exactly what the ordinary
    rounds do, on the shipped tiny pair in bf16 with graphs; sequences of different lengths finish mid-run. The
    staging kernel was compiled with the graphs: none of its rounds compiles it again."""
    keys = ("anchor_position", "draft_token_ids", "num_verified", "num_accepted", "num_committed")
    prompts = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n    def __init__(self, path):\n"]
    params = [SamplingParams(max_tokens=90 + 40 * i, ignore_eos=True) for i in range(3)]
    # exact-sampled rounds (round.DEVICE_DRAWS): rows drawn on the device with the verify, the propose queued from
    # the drawn tokens; else drawn one at a time on acceptance
    from sparkdec.spec import round as spec_round

    monkeypatch.setattr(spec_round, "DEVICE_DRAWS", device_draws)
    if device_draws:  # a coupled sequence's drafts are not the argmax the queued propose drafts: it never chains
        from sparkdec.spec import coupling

        monkeypatch.setattr(coupling, "COUPLED", False)
    params[1] = SamplingParams(max_tokens=120, ignore_eos=True, temperature=0.8, top_p=0.95, seed=7)
    runs = []
    from sparkdec.ops import triton_chain

    def compiled() -> int:
        return len(triton_chain._stage_kernel.device_caches[torch.cuda.current_device()][0])
    for ahead in (True, False):
        llm = LLM(device="cuda", dtype="bfloat16", lookahead=ahead)
        before = compiled()
        outs = llm.generate(prompts, params, trace=True)
        assert compiled() == before >= 2
        runs.append([(o.token_ids, [{k: r[k] for k in keys} for r in o.rounds]) for o in outs])
    assert runs[0] == runs[1]
    assert sum(x["num_accepted"] for _, rounds in runs[0] for x in rounds) > 50


def test_chain_staging_kernel_equals_its_torch_form_on_cuda():
    """ops/triton_chain.stage_kernel writes what spec/chain.stage_reference writes, on random rounds of 1-8
    sequences (random tokens, drafts agreeing with them up to a random point, ℓ and tiers), greedy and simulated."""
    from sparkdec.ops.triton_chain import stage_kernel
    from sparkdec.spec.chain import stage_reference

    gen, g, ps, pages = torch.Generator().manual_seed(3), 7, 16, 64
    for trial in range(40):
        n = int(torch.randint(1, 9, (1,), generator=gen))
        tier = [t for t in (1, 2, 4, 8) if t >= n][0]
        ells = torch.randint(0, g + 1, (n,), generator=gen)
        rows = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.long), ells[:-1] + 1]), 0)
        first = torch.randint(0, 50, (int(rows[-1] + ells[-1] + 1),), generator=gen)
        drafts = torch.randint(0, 50, (n, g), generator=gen)
        for i in range(n):  # agree with the verify's tokens up to a random point
            for k in range(min(int(torch.randint(0, g + 1, (1,), generator=gen)), int(ells[i]))):
                drafts[i, k] = first[rows[i] + k]
        starts = torch.randint(0, (pages - 2) * ps, (n,), generator=gen)
        tables = torch.randperm(tier * pages, generator=gen).view(tier, pages)
        vals = torch.stack([rows, ells, starts])
        for al in (None, 1 + trial % g):
            outs = []
            for stage, dev in ((stage_kernel, "cuda"), (stage_reference, "cpu")):
                out = (torch.full((tier,), -7, device=dev),) + tuple(torch.full((tier * g,), -7, device=dev)
                                                                     for _ in range(3))
                stage(first.to(dev), drafts.to(dev), vals.to(dev), tables.to(dev), out, tier, ps, 5 * ps, al)
                outs.append([t.cpu() for t in out])
            assert all(torch.equal(a, b) for a, b in zip(*outs)), (trial, al)


def test_coupled_drafts_in_the_propose_graph_match_the_torch_race(monkeypatch):
    """Exact-sampled sequences draft the coupled race (spec/coupling.py): the fused chain in the propose graphs
    drafts what the torch pick drafts, round for round, and the output is plain sampled decoding's (shipped tiny
    pair, bf16)."""
    from sparkdec.engine.llm_engine import DEFAULT_PAIR
    from sparkdec.models.dspark import DSparkDrafter

    keys = ("anchor_position", "draft_token_ids", "num_verified", "num_accepted")
    prompts = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n    def __init__(self, path):\n"]
    params = [SamplingParams(max_tokens=100, ignore_eos=True, temperature=0.8 + 0.2 * i, seed=3 + i) for i in range(3)]
    params[2] = SamplingParams(max_tokens=100, ignore_eos=True)  # a greedy sequence in the same batch
    plain = LLM(model=str(DEFAULT_PAIR / "target"), device="cuda", dtype="bfloat16").generate(prompts, params)
    runs = []
    for fused in (True, False):
        if not fused:  # the torch pick of spec/round.py, eagerly
            monkeypatch.setattr(DSparkDrafter, "_fused_markov_ok", lambda self, coupling=None: False)
        outs = LLM(device="cuda", dtype="bfloat16", cuda_graphs=fused).generate(prompts, params, trace=True)
        assert [o.token_ids for o in outs] == [o.token_ids for o in plain]
        runs.append([[{k: r[k] for k in keys} for r in o.rounds] for o in outs])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("v", [3000, 151936])
def test_top_p_mask_equals_the_scan_and_scatter_reference_on_cuda(v):
    """sampling.after_first_past (the shipped top-p mask) against suffix_drop (cummax + scatter) with CUDA's sort
    and argmax: few distinct probabilities, so the cut falls inside long runs of ties; both of torch's CUDA sort
    paths (a short and a vocabulary-sized row)."""
    from sparkdec.ops.triton_top_p import mass_reached
    from sparkdec.sampling import after_first_past, suffix_drop

    gen = torch.Generator(device="cuda").manual_seed(5)
    probs = torch.randint(1, 6, (16, v), device="cuda", generator=gen).float()
    probs = probs / probs.sum(-1, keepdim=True)
    sorted_p, ids = torch.sort(probs, dim=-1, descending=True, stable=True)
    for top_p in (0.1, 0.5, 0.9, 0.99):
        past = mass_reached(sorted_p, top_p)
        want = suffix_drop(past, ids)
        assert want.any() and not want.all()
        assert torch.equal(after_first_past(past, sorted_p, ids, probs), want), top_p


@pytest.mark.parametrize("v", [3000, 151936])
def test_kernel_sampler_cut_and_race_match_their_references_on_cuda(v):
    """ops/triton_nucleus.py on the GPU: top-p's kept set (no sort) is a float64 scan's up to tokens within rounding of
    the boundary, a row alone gets its batch bits, a cut inside a run of equal probabilities keeps the smallest ids,
    and the race's tokens are the log-space race over the kept set with sampling's keyed noise."""
    from sparkdec.ops.triton_nucleus import nucleus, race
    from sparkdec.sampling import STREAM_TARGET, _mix, uniform_noise
    from triton_checks import agrees_with_float64

    torch.manual_seed(5)
    x = torch.randn(16, v, device="cuda") * 3
    ids = torch.arange(v, device="cuda")[None]
    p, cut = nucleus(x, 0.8, 0.95)
    val = cut[:, :1].view(torch.float32)
    kept = (p > val) | ((p == val) & (ids < cut[:, 1:2]))
    assert agrees_with_float64(~kept, torch.softmax(x.double() / 0.8, -1), 0.95, 1e-5)
    for i in (0, 5, 15):
        p1, cut1 = nucleus(x[i:i + 1], 0.8, 0.95)
        assert torch.equal(p1[0], p[i]) and torch.equal(cut1[0], cut[i])
    keys = torch.tensor([_mix(7, 50 + i, STREAM_TARGET) for i in range(16)], device="cuda")
    got = race(x, 0.8, keys, 0.95).tolist()
    want = [int(torch.argmax(torch.where(kept[i], (x[i] / 0.8).double() - torch.log(-torch.log(
        uniform_noise(7, 50 + i, STREAM_TARGET, v, "cuda"))), float("-inf")))) for i in range(16)]
    assert got == want
    xb = (torch.randn(8, v, device="cuda") * 3).bfloat16()  # bf16 logits: runs of equal probabilities at the cut
    p, cut = nucleus(xb, 0.8, 0.95)
    val = cut[:, :1].view(torch.float32)
    kept = (p > val) | ((p == val) & (ids < cut[:, 1:2]))
    assert agrees_with_float64(~kept, torch.softmax(xb.double() / 0.8, -1), 0.95, 1e-5)
    flat = torch.zeros(2, v, device="cuda")
    p, cut = nucleus(flat, 1.0, 0.5)
    val = cut[:, :1].view(torch.float32)
    kept = (p > val) | ((p == val) & (ids < cut[:, 1:2]))
    assert torch.equal(kept, ids.expand(2, v) < cut[:, 1:2]) and abs(int(cut[0, 1]) - v // 2) <= 1


def test_top_p_kept_sets_do_not_depend_on_how_many_rows_share_the_call():
    """sampling._top_p_drop over [R, V] gives each row the mask it gets alone (torch.cumsum on CUDA scans one row and
    several rows with different bits: 2 of 200 rows kept a different set at top-p 0.95), and the kept set of a
    float64 scan up to the tokens whose mass before them is within float32 rounding of top_p."""
    from sparkdec.sampling import _top_p_drop
    from triton_checks import agrees_with_float64

    torch.manual_seed(3)
    probs = torch.softmax(torch.randn(200, 151936, device="cuda") * 3, dim=-1)
    batched = _top_p_drop(probs, 0.95)
    assert all(torch.equal(batched[i], _top_p_drop(probs[i], 0.95)) for i in range(200))
    assert all(torch.equal(batched[i:i + 8], _top_p_drop(probs[i:i + 8], 0.95)) for i in range(0, 200, 8))
    assert agrees_with_float64(batched, probs, 0.95, 1e-4)


def test_split_stamps_keep_the_bits_and_order_the_steps():
    """ops/stamps.py on: the split kernel's output bits are unchanged, and a program with keys stamps its steps in
    order (start <= release <= lengths <= page ids <= keys <= products <= end)."""
    import sparkdec.ops.triton_attention as ta
    from sparkdec.ops import stamps

    ps, d = 16, 128
    q, kc, vc, ctx = _attention_case(32, 8)
    args = (q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, ctx.max_kv_len, d ** -0.5)
    want = ta.triton_paged_attention(*args)
    stamps.alloc({"split": 1 << 16}, 1, "cuda")  # (programs: rows x kv heads x programs per row, under 2^16)
    try:
        got = ta.triton_paged_attention(*args)
        torch.cuda.synchronize()
        rows = stamps.BUFFERS["split"][0].cpu()
    finally:
        stamps.off()
    assert torch.equal(got, want)
    live = rows[rows[:, 7] > 0]
    assert live.shape[0] > 0
    order = live[:, [0, 1, 4, 5, 6, 7, 2]]
    assert bool((order[:, 1:] >= order[:, :-1]).all())


@pytest.mark.parametrize("cap", [168, 128])
def test_split_register_cap_keeps_the_bits(cap, monkeypatch):
    """SPLIT_MAXNREG (three or four split programs per SM): the same output bits as the uncapped kernel, for rows
    alone and in blocks."""
    import sparkdec.ops.triton_attention as ta

    ps, d = 16, 128
    q, kc, vc, ctx = _attention_case(32, 8)
    args = (q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, ctx.max_kv_len, d ** -0.5)
    blocks = dict(blocks=(ctx.block_lead, ctx.block_rows))
    want = [ta.triton_paged_attention(*args, **blocks), ta.triton_paged_attention(*args)]
    monkeypatch.setattr(ta, "SPLIT_MAXNREG", cap)
    assert torch.equal(ta.triton_paged_attention(*args, **blocks), want[0])
    assert torch.equal(ta.triton_paged_attention(*args), want[1])


@pytest.mark.parametrize("hq,hkv,programs,block_last,direct", [
    (32, 8, 32, False, False), (16, 8, 32, False, False), (8, 8, 32, False, False), (32, 8, 2, True, False),
    (32, 8, 32, False, True), (16, 8, 2, True, True)])
def test_gluon_split_gives_the_triton_split_bits(hq, hkv, programs, block_last, direct):
    """The Gluon split kernel (ops/gluon_split.py, keys copied before the PDL wait) against the Triton split kernel:
    the same output bits for rows alone and rows in blocks (a 40-row sequence: blocks that continue one), fine and
    coarse splits, query groups of 4, 2 and 1; with 2 programs per (block, kv head) each program walks many splits
    (and the grid puts the row blocks last). direct: GLUON_STORE_DIRECT (partials stored from the accumulator).
    (No writer races the copies here: see the decoding test.)"""
    import sparkdec.ops.triton_attention as ta

    ps, d = 16, 128
    q, kc, vc, ctx = _attention_case(hq, hkv)
    args = (q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, ctx.max_kv_len, d ** -0.5)
    blocks = dict(blocks=(ctx.block_lead, ctx.block_rows))
    want = ta.triton_paged_attention(*args, **blocks)
    saved = ta.GLUON_SPLIT, ta.GLUON_PROGRAMS, ta.GLUON_BLOCK_LAST, ta.GLUON_STORE_DIRECT
    try:
        ta.GLUON_SPLIT, ta.GLUON_PROGRAMS, ta.GLUON_BLOCK_LAST = True, programs, block_last
        ta.GLUON_STORE_DIRECT = direct
        group_pad = hq // hkv
        assert ta.gluon_split.supports(q, kc, vc, group_pad, ta.QUERY_TILE // group_pad, 1)
        got = ta.triton_paged_attention(*args, **blocks, first_written=ctx.positions)
        assert torch.equal(got, want)
        for r in range(ctx.num_tokens):
            one = (q[r:r + 1], kc, vc, ctx.block_tables, ctx.row_seq[r:r + 1], ctx.row_kv_len[r:r + 1], ps,
                   ctx.max_kv_len, d ** -0.5)
            assert torch.equal(ta.triton_paged_attention(*one, first_written=ctx.positions[r:r + 1]), want[r:r + 1])
    finally:
        ta.GLUON_SPLIT, ta.GLUON_PROGRAMS, ta.GLUON_BLOCK_LAST, ta.GLUON_STORE_DIRECT = saved


def test_gluon_split_one_step_buffers_give_the_same_bits(monkeypatch):
    """GLUON_ONE_STEP (a window of at most FINE_END keys: every split one 64-key step, buffers for one step): each lone
    row of the attention case, in a 1280-key window as the short graph runs it, gets the Triton split's bits (also with
    GLUON_STORE_DIRECT), and the kernel was launched with STEPS=1."""
    import sparkdec.ops.triton_attention as ta

    if not ta.gluon_split.AVAILABLE or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon split runs on Hopper (sm_90) with triton 3.6")
    ps, d = 16, 128
    q, kc, vc, ctx = _attention_case(32, 8)
    kernel, steps = ta.gluon_split._gluon_split_kernel, []

    class Spy:
        def __getitem__(self, grid):
            return lambda *a, **kw: steps.append(kw["STEPS"]) or kernel[grid](*a, **kw)

    monkeypatch.setattr(ta.gluon_split, "_gluon_split_kernel", Spy())
    monkeypatch.setattr(ta, "GLUON_PROGRAMS", 32)
    monkeypatch.setattr(ta, "GLUON_BLOCK_LAST", True)
    for r in [r for r in range(ctx.num_tokens) if int(ctx.row_kv_len[r]) <= 1280]:
        one = (q[r:r + 1], kc, vc, ctx.block_tables, ctx.row_seq[r:r + 1], ctx.row_kv_len[r:r + 1], ps, 1280,
               d ** -0.5)
        monkeypatch.setattr(ta, "GLUON_SPLIT", False)
        want = ta.triton_paged_attention(*one)
        monkeypatch.setattr(ta, "GLUON_SPLIT", True)
        for one_step, direct in ((False, False), (True, False), (True, True), (False, True)):
            monkeypatch.setattr(ta, "GLUON_ONE_STEP", one_step)
            monkeypatch.setattr(ta, "GLUON_STORE_DIRECT", direct)
            assert torch.equal(ta.triton_paged_attention(*one, first_written=ctx.positions[r:r + 1]), want), r
    assert 1 in steps and 2 in steps


@pytest.mark.parametrize("prefill_kernel,block_last", [(True, False), (False, True)])
def test_gluon_split_decoding_equals_the_triton_split(tmp_path, monkeypatch, prefill_kernel, block_last):
    """Greedy decoding with the Gluon split, whose copies race the RoPE kernel's key stores (only the rows the forward
    writes are loaded after the wait), gives the Triton split's tokens, through graphs and eager. Without the prefill
    kernel, prompt chunks of 20 and 35 tokens take the split kernel too: blocks that continue a sequence."""
    import sparkdec.ops.triton_attention as ta
    from sparkdec.engine import context

    monkeypatch.setattr(context, "PREFILL_KERNEL", prefill_kernel)
    model = make_target(tmp_path / "g128", vocab_size=509, hidden_size=256, intermediate_size=512,
                        num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                        tie_word_embeddings=False, max_position_embeddings=4096)
    params = SamplingParams(max_tokens=160, ignore_eos=True)
    prompts = PROMPTS + [list(range(100, 400)) * 7]  # a 2100-token prompt: coarse splits past 2048
    want = [o.token_ids for o in LLM(model=str(model), device="cuda", dtype="bfloat16").generate(prompts, params)]
    monkeypatch.setattr(ta, "GLUON_SPLIT", True)
    monkeypatch.setattr(ta, "GLUON_BLOCK_LAST", block_last)  # (the grid's row blocks last)
    ran = []
    supports = ta.gluon_split.supports
    monkeypatch.setattr(ta.gluon_split, "supports", lambda *a: ran.append(supports(*a)) or ran[-1])
    for graphs in (True, False):
        llm = LLM(model=str(model), device="cuda", dtype="bfloat16", cuda_graphs=graphs)
        assert [o.token_ids for o in llm.generate(prompts, params)] == want, graphs
    assert any(ran)  # the Gluon kernel did run


def test_short_graph_gluon_attention_equals_eager_triton(tmp_path, monkeypatch):
    """The shipped short graphs (engine/graphs.SHORT_BOUNDS: the Gluon split up to 1280 keys) give a lone row eager
    decoding's tokens (the Triton split), on a model whose head_dim the Gluon split takes; the Gluon kernel did run."""
    import sparkdec.ops.triton_attention as ta
    from sparkdec.engine import graphs

    if not ta.gluon_split.AVAILABLE or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon split runs on Hopper (sm_90) with triton 3.6")
    assert any(s.get("GLUON_SPLIT") for _, s in graphs.SHORT_BOUNDS)
    model = make_target(tmp_path / "g128", vocab_size=509, hidden_size=256, intermediate_size=512,
                        num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                        tie_word_embeddings=False, max_position_embeddings=4096)
    params = SamplingParams(max_tokens=120, ignore_eos=True)
    prompts = PROMPTS + [list(range(100, 400)) * 4]  # a 1200-token prompt: decoding crosses the 1280-key bound
    eager = LLM(model=str(model), device="cuda", dtype="bfloat16", cuda_graphs=False)
    want = [eager.generate([p], params)[0].token_ids for p in prompts]
    ran = []
    supports = ta.gluon_split.supports
    monkeypatch.setattr(ta.gluon_split, "supports", lambda *a: ran.append(supports(*a)) or ran[-1])
    llm = LLM(model=str(model), device="cuda", dtype="bfloat16")
    g = llm.engine.runner.graphs
    gluon_graph = next(graph for bound, graph in g.short[1] if bound == 1280)[0]
    replayed = []
    graph_for = g.graph_for
    monkeypatch.setattr(g, "graph_for", lambda *a: replayed.append(graph_for(*a)[0] is gluon_graph) or graph_for(*a))
    assert [llm.generate([p], params)[0].token_ids for p in prompts] == want
    assert any(ran) and any(replayed) and not all(replayed)  # captured with the Gluon split, replayed, and left


def test_attention_load_schedules_keep_the_tokens(tmp_path, monkeypatch):
    """SPLIT_DEAD_EXIT: the split kernel's programs that hold no key end without their PDL wait (and, with
    SPLIT_KV_TOGETHER, load a step's values with its keys, with SPLIT_PAGES_EARLY, the first step's page ids before the
    wait; the combine, with COMBINE_PRELOAD, its chunks' at once; and
    the q/k norm + RoPE kernel, with ROPE_V_EARLY, a key head's values with its key);
    greedy decoding (graphs and eager, short and long rows,
    prompt blocks through the split kernel) gives the same tokens."""
    import sparkdec.ops.triton_attention as ta
    import sparkdec.ops.triton_fused as triton_fused
    from sparkdec.engine import context

    monkeypatch.setattr(context, "PREFILL_KERNEL", False)
    model = make_target(tmp_path / "d128", vocab_size=509, hidden_size=256, intermediate_size=512,
                        num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                        tie_word_embeddings=False, max_position_embeddings=4096)
    params = SamplingParams(max_tokens=160, ignore_eos=True)
    prompts = PROMPTS + [list(range(100, 400)) * 7]
    monkeypatch.setattr(ta, "COMBINE_PRELOAD", False)  # the reference: every switch off
    monkeypatch.setattr(triton_fused, "ROPE_V_EARLY", False)
    want = [o.token_ids for o in LLM(model=str(model), device="cuda", dtype="bfloat16").generate(prompts, params)]
    monkeypatch.setattr(ta, "SPLIT_DEAD_EXIT", True)
    monkeypatch.setattr(ta, "SPLIT_KV_TOGETHER", True)
    monkeypatch.setattr(ta, "COMBINE_PRELOAD", True)
    monkeypatch.setattr(ta, "SPLIT_PAGES_EARLY", True)
    monkeypatch.setattr(triton_fused, "ROPE_V_EARLY", True)
    for graphs in (True, False):
        llm = LLM(model=str(model), device="cuda", dtype="bfloat16", cuda_graphs=graphs)
        assert [o.token_ids for o in llm.generate(prompts, params)] == want, graphs


def test_bf16_bypass_keeps_the_tokens_with_graphs():
    """The speculation bypass (spec/bypass.py) with graphs in bf16: sequences set aside (a propose given a prohibitive
    cost) decode plainly one step ahead and are probed again, and the engine's own costs (timed on trash rows at
    start-up on CUDA, and between steps when more are needed: the plain step queued ahead drained, the queued
    propose dropped) leave every request's tokens as plain decoding's, greedy and sampled."""
    from sparkdec.spec import bypass

    class Prohibitive:
        def ready(self, tokens, seqs):
            return True

        def forward_ms(self, tokens):
            return 1.0

        def propose_ms(self, seqs):
            return 100.0

    prompts = ["def parse(line):\n", "The standard library provides", "class Stack:\n"]
    params = [SamplingParams(max_tokens=200, ignore_eos=True),
              SamplingParams(max_tokens=150, ignore_eos=True, temperature=1.2, seed=5),
              SamplingParams(max_tokens=180, ignore_eos=True, temperature=0.8, top_p=0.95, seed=6)]
    want = [o.token_ids for o in LLM(device="cuda", dtype="bfloat16", speculative=False).generate(prompts, params)]
    aside = LLM(device="cuda", dtype="bfloat16", spec_bypass=True)
    aside.engine.bypass = bypass.Bypass(Prohibitive(), calibrate=False)
    outs = aside.generate(prompts, params)
    assert [o.token_ids for o in outs] == want and all(o.stats["bypassed_tokens"] > 100 for o in outs)
    timed = LLM(device="cuda", dtype="bfloat16", spec_bypass=True, max_num_seqs=4)
    costs = timed.engine.bypass.costs
    assert {1, 2, 4, 8, 16, 32}.issubset(costs.forward_points) and {1, 2, 4}.issubset(costs.propose_points)
    costs.forward_points.pop(32)  # (as if a larger batch came: timed between steps)
    for n in (1, 3):
        assert [o.token_ids for o in timed.generate(prompts[:n], params[:n])] == want[:n]
    assert 32 in costs.forward_points
