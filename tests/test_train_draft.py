"""The drafter's training forward against the engine's inference path (slots, taps, visibility), the DSpark
loss, anchor sampling and a few CPU training steps that write a loadable DeepSpec-format checkpoint."""
from __future__ import annotations

import json

import pytest
import torch

from helpers import GEOMETRIES, make_draft, make_target
from sparkdec.engine.context import build_context
from sparkdec.engine.runner import ModelRunner
from sparkdec.models.draft_loader import load_draft
from sparkdec.models.loader import load_target
from sparkdec.ops.rope import RotaryTable
from sparkdec.train.draft import (BlockBatch, DraftData, DraftRecipe, attention_mask, draft_hidden, dspark_loss,
                                  heads_forward, load_hf_target, select_anchors, target_features, train_draft)

GAMMA = 7
PAGE = 16


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    tdir = make_target(root / "target", seed=3, **GEOMETRIES["tied_gqa2"])
    ddir = make_draft(root / "draft", tdir, seed=5, block_size=GAMMA, markov_rank=16, taps=[0, 1], num_layers=2)
    return tdir, ddir


def _engine_blocks(tdir, ddir, tokens: list[int], anchors: list[int]):
    """Per anchor s: (h [γ, d], base logits U [γ, V], z [γ, V], confidences [γ]) from the engine's own path,
    with the Markov chain fed the true next tokens (teacher forcing, as in training)."""
    target, tcfg = load_target(tdir, "cpu", "float32")
    drafter, dcfg = load_draft(ddir, target, tcfg, "cpu")
    runner = ModelRunner(target, tcfg, drafter, dcfg, num_pages=8, page_size=PAGE, max_positions=128, device="cpu")
    table = list(range(8))
    runner.target_forward([(table, tokens, list(range(len(tokens))))])  # context K/V at every position
    out = {}
    # NOTE: a propose at s overwrites draft-cache rows s..s+γ-1 with block K/V; going right to left keeps every
    # later (smaller) anchor's context rows (< s) intact.
    for s in sorted(anchors, reverse=True):
        ids = torch.tensor([tokens[s]] + [dcfg.mask_token_id] * (GAMMA - 1))
        ctx = build_context([(table, list(range(s, s + GAMMA)), True)], PAGE, "cpu")
        with torch.inference_mode():
            h = drafter.block_hidden(ids, ctx, runner.draft_kv.layers)
            u = drafter.base_logits(h)
        teacher = [tokens[min(s + k + 1, len(tokens) - 1)] for k in range(GAMMA)]
        _, z, conf = runner.propose([table], [tokens[s]], [s], lambda z, k: torch.tensor([teacher[k]]))
        out[s] = (h, u, z[0], conf[0])
    return out, drafter


def _training_blocks(tdir, drafter, input_ids: torch.Tensor, anchors: torch.Tensor, keep: torch.Tensor):
    hf = load_hf_target(tdir, "cpu", torch.float32)
    cfg = drafter.config
    bb = BlockBatch(input_ids, anchors, keep, cfg.block_size, cfg.mask_token_id)
    taps, _ = target_features(hf, input_ids, cfg.target_layer_ids)
    rope = RotaryTable(cfg.layers.head_dim, cfg.layers.rope_theta, 128)
    with torch.no_grad():
        h = draft_hidden(drafter, hf.model.embed_tokens.weight, taps, bb, rope)
        u, z, conf = heads_forward(drafter, hf.lm_head.weight, h, bb.prev)
    return h, u, z, torch.sigmoid(conf)


def test_training_forward_matches_engine(pair):
    tdir, ddir = pair
    torch.manual_seed(0)
    t = 30
    input_ids = torch.randint(4, 384, (2, t))
    anchors = torch.tensor([[0, 5, 11, 19, 0], [3, 4, 17, 22, 0]])
    keep = torch.tensor([[True, True, True, True, False], [True, True, True, True, False]])  # one dummy block each
    for b in range(2):
        tokens = input_ids[b].tolist()
        engine, drafter = _engine_blocks(tdir, ddir, tokens, anchors[b, keep[b]].tolist())
        h, u, z, conf = _training_blocks(tdir, drafter, input_ids, anchors, keep)
        for a in range(anchors.shape[1]):
            if not keep[b, a]:
                continue
            s = int(anchors[b, a])
            eh, eu, ez, ec = engine[s]
            torch.testing.assert_close(h[b, a], eh, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(u[b, a], eu, atol=1e-4, rtol=1e-4)
            # Markov-corrected logits and confidences: compare slots whose teacher token lies inside the sequence
            n = min(GAMMA, t - 1 - s)
            torch.testing.assert_close(z[b, a, :n], ez[:n], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(conf[b, a, :n], ec[:n], atol=1e-5, rtol=1e-4)


def test_engine_comparison_catches_a_slot_shift(pair):
    """The oracle is sharp: feeding the block one position later (DFlash-style) does not match."""
    tdir, ddir = pair
    torch.manual_seed(1)
    input_ids = torch.randint(4, 384, (1, 24))
    engine, drafter = _engine_blocks(tdir, ddir, input_ids[0].tolist(), [10])
    h, _, _, _ = _training_blocks(tdir, drafter, input_ids, torch.tensor([[11]]), torch.tensor([[True]]))
    assert (h[0, 0] - engine[10][0]).abs().max() > 1e-2


def test_attention_mask_visibility():
    m = attention_mask(torch.tensor([[2, 5]]), torch.tensor([[True, True]]), seq_len=8, gamma=3)[0, 0]
    assert m.shape == (6, 8 + 6)
    assert m[0, :8].tolist() == [True, True] + [False] * 6  # context strictly before anchor 2
    assert m[3, :8].tolist() == [True] * 5 + [False] * 3  # anchor 5
    assert m[0, 8:].tolist() == [True] * 3 + [False] * 3  # own block only, both directions
    assert m[5, 8:].tolist() == [False] * 3 + [True] * 3


def test_select_anchors_valid_sorted_and_masked():
    mask = torch.zeros(2, 20, dtype=torch.bool)
    mask[0, 5:] = True
    mask[1, 10:13] = True  # only anchors 10 and 11 are valid
    anchors, keep = select_anchors(mask, 8, torch.Generator().manual_seed(0))
    assert keep[0].all() and keep[1].sum() == 2
    a0 = anchors[0].tolist()
    assert a0 == sorted(a0) and len(set(a0)) == 8 and all(5 <= p <= 18 for p in a0)
    assert anchors[1, keep[1]].tolist() == [10, 11]


def test_block_batch_labels_and_contiguous_mask():
    ids = torch.arange(100, 120)[None]
    loss_mask = torch.ones(1, 20, dtype=torch.bool)
    loss_mask[0, 16] = False
    bb = BlockBatch(ids, torch.tensor([[3, 12]]), torch.tensor([[True, True]]), GAMMA, 99, loss_mask)
    assert bb.block_ids[0, 0].tolist() == [103] + [99] * 6
    assert bb.labels[0, 0].tolist() == list(range(104, 111))  # slot k predicts p + k + 1 (DSpark convention)
    assert bb.prev[0, 0].tolist() == list(range(103, 110))  # [x0, label_1 .. label_6]
    assert bb.mask[0, 0].all()
    assert bb.mask[0, 1].tolist() == [True, True, True, False, False, False, False]  # label 16 unsupervised, then cut


def test_loss_is_zero_for_a_perfect_drafter_and_trains_the_confidence():
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (1, 16))
    bb = BlockBatch(ids, torch.tensor([[2, 6]]), torch.tensor([[True, True]]), GAMMA, 0)
    tl = torch.randn(1, 2, GAMMA, 50)
    recipe = DraftRecipe(ce_alpha=0.0)
    loss, stats = dspark_loss(tl.clone(), tl, torch.full((1, 2, GAMMA), 30.0), bb, recipe)
    assert stats["l1"] < 1e-5 and loss.item() < 1e-4  # TV 0, confidence 1 for a label of 1
    conf = torch.zeros(1, 2, GAMMA, requires_grad=True)
    loss, _ = dspark_loss(tl + torch.randn_like(tl), tl, conf, bb, recipe)
    loss.backward()
    assert conf.grad.abs().sum() > 0


def test_train_draft_writes_a_loadable_checkpoint(tmp_path):
    tdir = make_target(tmp_path / "target", seed=2, **GEOMETRIES["tied_gqa2"])
    stream = torch.randint(4, 384, (4000,)).numpy()
    recipe = DraftRecipe(num_layers=2, target_layer_ids=(0, 1), markov_rank=8, num_anchors=16, seq_len=48,
                         batch_size=2, seconds=1e9, max_steps=3, eval_every_s=1e9)
    data = DraftData("cpu", recipe.seq_len, 0, stream=stream)
    out = train_draft(tdir, data, tmp_path / "draft", recipe, device="cpu", log=lambda *_: None, mask_token_id=3)
    assert out["steps"] == 3
    cfg = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3DSparkModel"] and cfg["block_size"] == GAMMA and cfg["mask_token_id"] == 3
    target, tcfg = load_target(tdir, "cpu", "float32")
    drafter, dcfg = load_draft(tmp_path / "draft", target, tcfg, "cpu")
    assert dcfg.markov_rank == 8 and dcfg.confidence_head_with_markov
    from safetensors import safe_open

    with safe_open(str(tmp_path / "draft" / "model.safetensors"), "pt") as f:
        assert {"embed_tokens.weight", "lm_head.weight", "fc.weight"} <= set(f.keys())
        assert f.get_tensor("fc.weight").dtype == torch.bfloat16
