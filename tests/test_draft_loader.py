"""Drafter loading (spec §13-14): mismatched or foreign drafters fail at load time with clear errors;
the checkpoint's vocabulary copies are skipped; sharded drafters load like single-file ones."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import make_draft
from sparkdec import LLM
from sparkdec.errors import (CheckpointError, DraftMismatchError, SparkdecError, UnsupportedArchitectureError)

TARGET = "tied_gqa2"  # d=64, V=384, 3 target layers, 4 query heads over 2 KV heads, head_dim 16


def load(target: Path, draft: Path) -> LLM:
    return LLM(model=str(target), draft=str(draft), device="cpu", kv_cache_tokens=256)


def edit_config(folder: Path, drop=(), **updates) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    for key in drop:
        cfg.pop(key, None)
    cfg.update(updates)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return folder


def edit_tensors(folder: Path, drop=(), add: dict | None = None) -> Path:
    t = load_file(str(folder / "model.safetensors"))
    for key in drop:
        del t[key]
    t.update(add or {})
    save_file(t, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def target(targets) -> Path:
    return targets[TARGET]


@pytest.fixture
def draft(tmp_path, target) -> Path:
    """A valid drafter (vanilla Markov head, confidence head with Markov input); tests break one thing."""
    return make_draft(tmp_path / "draft", target, block_size=4, markov_rank=8)


def expect(target, draft, exc, *fragments):
    with pytest.raises(exc) as info:
        load(target, draft)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in error message: {msg}"
    assert isinstance(info.value, SparkdecError)
    return msg


# ---------------------------------------------------------------- the drafter does not fit the target


def test_valid_drafter_loads(target, draft):
    llm = load(target, draft)
    assert llm.engine.draft_cfg.block_size == 4
    assert llm.engine.draft_cfg.target_layer_ids == (0, 1)


def test_hidden_size_mismatch(target, draft):
    edit_config(draft, hidden_size=80)
    expect(target, draft, DraftMismatchError, "hidden_size 80", "64")


def test_drafter_of_another_target(targets, tmp_path):
    """A drafter made for a different target (d=96, V=509, 4 layers) is refused by name, not by a shape crash."""
    other = make_draft(tmp_path / "other", targets["untied_gqa4_odd_vocab"])
    expect(targets[TARGET], other, DraftMismatchError, "hidden_size 96")


def test_vocab_mismatch(target, draft):
    edit_config(draft, vocab_size=383)
    expect(target, draft, DraftMismatchError, "vocab_size 383", "384")


def test_num_target_layers_mismatch(target, draft):
    edit_config(draft, num_target_layers=36)
    expect(target, draft, DraftMismatchError, "num_target_layers 36", "3")


@pytest.mark.parametrize("taps", [[1, 0], [0, 0], [1, 1]])
def test_taps_not_strictly_increasing(target, tmp_path, taps):
    d = make_draft(tmp_path / "d", target, taps=taps)
    expect(target, d, DraftMismatchError, "target_layer_ids", "strictly increasing")


@pytest.mark.parametrize("taps", [[0, 2], [2], [-1, 1, 2]])
def test_tap_on_targets_last_layer(target, tmp_path, taps):
    d = make_draft(tmp_path / "d", target, taps=taps)
    expect(target, d, DraftMismatchError, "target_layer_ids", "last layer")


def test_tap_below_embedding(target, tmp_path):
    d = make_draft(tmp_path / "d", target, taps=[-2, 0])
    expect(target, d, DraftMismatchError, "target_layer_ids")


def test_embedding_tap_is_allowed(target, tmp_path):
    d = make_draft(tmp_path / "d", target, taps=[-1, 1])
    assert load(target, d).engine.draft_cfg.target_layer_ids == (-1, 1)


def test_block_size_zero(target, tmp_path):
    d = make_draft(tmp_path / "d", target, block_size=0)
    expect(target, d, DraftMismatchError, "block_size 0")


@pytest.mark.parametrize("mask", [384, 1000, -1])
def test_mask_token_out_of_range(target, tmp_path, mask):
    d = make_draft(tmp_path / "d", target, mask_token_id=mask)
    expect(target, d, DraftMismatchError, f"mask_token_id {mask}")


def test_layer_types_not_full_attention(target, draft):
    edit_config(draft, layer_types=["full_attention", "sliding_attention"])
    expect(target, draft, DraftMismatchError, "layer_types")


def test_unknown_markov_head_type(target, tmp_path):
    d = make_draft(tmp_path / "d", target, markov_head_type="lstm")
    expect(target, d, DraftMismatchError, "markov_head_type", "lstm")


@pytest.mark.parametrize("key", ["target_layer_ids", "mask_token_id", "num_anchors", "markov_rank", "block_size"])
def test_required_deepspec_key_missing(target, draft, key):
    edit_config(draft, drop=[key])
    expect(target, draft, CheckpointError, key)


def test_confidence_with_markov_input_but_no_markov_head(target, draft):
    edit_config(draft, markov_rank=0, enable_confidence_head=True, confidence_head_with_markov=True)
    expect(target, draft, DraftMismatchError, "confidence_head_with_markov", "markov_rank")


def test_head_geometry_differs_from_target(target, draft):
    """Spec §13.5: the draft's attention geometry must be the target's (its config is a copy of the target's).
    Here config and tensors agree with each other (8 query heads of 16), only the target has 4."""
    edit_config(draft, num_attention_heads=8)
    add = {}
    for i in range(2):
        add[f"layers.{i}.self_attn.q_proj.weight"] = torch.zeros(128, 64)
        add[f"layers.{i}.self_attn.o_proj.weight"] = torch.zeros(64, 128)
    edit_tensors(draft, add=add)
    expect(target, draft, DraftMismatchError, "num_attention_heads")


# ---------------------------------------------------------------- tensors do not match the config


def test_missing_tensor(target, draft):
    edit_tensors(draft, drop=["layers.1.self_attn.k_proj.weight"])
    expect(target, draft, CheckpointError, "missing", "layers.1.self_attn.k_proj.weight")


def test_missing_markov_tensors_for_a_markov_config(target, draft):
    edit_tensors(draft, drop=["markov_head.markov_w1.weight", "markov_head.markov_w2.weight"])
    expect(target, draft, CheckpointError, "missing", "markov_head.markov_w1.weight")


def test_unexpected_tensor(target, draft):
    edit_tensors(draft, add={"layers.0.self_attn.extra_proj.weight": torch.zeros(4, 4)})
    expect(target, draft, CheckpointError, "unexpected", "layers.0.self_attn.extra_proj.weight")


def test_heads_present_but_config_says_dflash_baseline(target, draft):
    """markov_rank 0 and no confidence head in config.json, yet Markov/confidence tensors present."""
    edit_config(draft, markov_rank=0, enable_confidence_head=False, confidence_head_with_markov=False)
    expect(target, draft, CheckpointError, "unexpected", "markov_head.markov_w1.weight")


@pytest.mark.parametrize("name,shape", [("markov_head.markov_w2.weight", (384, 9)),
                                        ("fc.weight", (64, 64 * 3)),
                                        ("confidence_head.proj.weight", (1, 64)),
                                        ("layers.0.self_attn.q_proj.weight", (32, 64))])
def test_wrong_shaped_tensor(target, draft, name, shape):
    edit_tensors(draft, add={name: torch.zeros(shape)})
    expect(target, draft, CheckpointError, name, str(tuple(shape)))


# ---------------------------------------------------------------- foreign formats (spec §14)


def test_zlab_dflash_refused(target, tmp_path):
    d = make_draft(tmp_path / "d", target)
    cfg = json.loads((d / "config.json").read_text())
    for key in ("target_layer_ids", "mask_token_id", "num_anchors", "markov_rank", "markov_head_type",
                "enable_confidence_head", "confidence_head_with_markov", "num_target_layers"):
        cfg.pop(key)
    cfg.update(architectures=["DFlashDraftModel"], block_size=16,
               auto_map={"AutoModel": "dflash.DFlashDraftModel"},
               dflash_config={"mask_token_id": 383, "target_layer_ids": [0, 1]})
    (d / "config.json").write_text(json.dumps(cfg))
    edit_tensors(d, drop=[k for k in load_file(str(d / "model.safetensors")) if k.startswith(("markov", "confidence",
                                                                                             "embed", "lm_head"))])
    msg = expect(target, d, UnsupportedArchitectureError, "DFlash")
    assert "Qwen3DSparkModel" in msg  # says what it does load


def test_legacy_dspark_draft_model_refused(target, draft):
    edit_config(draft, architectures=["DSparkDraftModel"],
                dflash_config={"projector_type": "dspark", "markov_rank": 8, "mask_token_id": 383})
    expect(target, draft, UnsupportedArchitectureError, "DSparkDraftModel")


@pytest.mark.parametrize("kind", ["dspark", "dflash"])
def test_speculators_refused(target, draft, kind):
    edit_config(draft, speculators_model_type=kind, architectures=["DSparkSpeculator"],
                transformer_layer_config={"hidden_size": 64}, aux_hidden_state_layer_ids=[1, 2],
                sample_from_anchor=True, draft_vocab_size=128)
    expect(target, draft, UnsupportedArchitectureError, "speculators", kind)


def test_deepseek_v4_in_checkpoint_drafter_refused(target, draft):
    edit_config(draft, architectures=["DeepseekV4ForCausalLM"], dspark_block_size=5, dspark_markov_rank=256,
                dspark_target_layer_ids=[0, 1], dspark_noise_token_id=128799)
    expect(target, draft, UnsupportedArchitectureError, "DeepSeek-V4", "dspark_")


def test_gemma4_dspark_refused(target, draft):
    edit_config(draft, architectures=["Gemma4DSparkModel"], model_type="gemma4_text", final_logit_softcapping=30.0)
    expect(target, draft, UnsupportedArchitectureError, "Gemma4DSparkModel", "Qwen3DSparkModel")


def test_target_passed_as_drafter_refused(target):
    expect(target, target, UnsupportedArchitectureError, "Qwen3ForCausalLM")


# ---------------------------------------------------------------- what is (not) loaded


def test_vocabulary_copies_are_skipped_and_aliased(target, draft):
    """embed_tokens / lm_head in the drafter checkpoint are never loaded (spec §8): even garbage shapes load,
    and the drafter computes with the target's own matrices."""
    edit_tensors(draft, add={"embed_tokens.weight": torch.full((3, 5), float("nan")),
                             "lm_head.weight": torch.full((7,), float("nan"))})
    llm = load(target, draft)
    drafter, tmodel = llm.engine.drafter, llm.engine.target
    names = [n for n, _ in drafter.named_parameters()]
    assert not any(n.startswith(("embed_tokens", "lm_head")) for n in names), names
    assert drafter._shared["embed"].weight is tmodel.model.embed_tokens.weight
    assert drafter._shared["lm_head"].weight is tmodel.lm_head.weight
    own = load_file(str(target / "model.safetensors"))["model.embed_tokens.weight"]
    assert torch.equal(drafter._shared["embed"].weight.detach().cpu(), own)
    # no draft parameter is a vocabulary-sized [V, d] matrix (only the Markov W1/W2 are [V, r])
    assert all(tuple(p.shape) != (384, 64) for p in drafter.parameters())


def test_loaded_values_equal_the_checkpoint(target, draft):
    llm = load(target, draft)
    state = {k: v.detach().cpu() for k, v in llm.engine.drafter.state_dict().items()}
    ckpt = load_file(str(draft / "model.safetensors"))
    for k, v in ckpt.items():
        if k.startswith(("embed_tokens.", "lm_head.")):
            continue
        assert torch.equal(state[k].float(), v.float()), k


def test_missing_confidence_bias_is_zero(target, draft):
    edit_tensors(draft, drop=["confidence_head.proj.bias"])
    llm = load(target, draft)
    assert float(llm.engine.drafter.confidence_head.proj.bias.detach().abs().sum()) == 0.0


@pytest.mark.parametrize("kind", ["gated", "rnn"])
def test_richer_markov_heads_and_dflash_baseline_load(target, tmp_path, kind):
    load(target, make_draft(tmp_path / kind, target, markov_head_type=kind, markov_rank=8))
    base = make_draft(tmp_path / "dflash", target, markov_rank=0, confidence=False)
    llm = load(target, base)
    assert llm.engine.drafter.markov_head is None and llm.engine.drafter.confidence_head is None


def test_sharded_drafter_loads(target, draft, tmp_path):
    tensors = load_file(str(draft / "model.safetensors"))
    names = sorted(tensors)
    half = len(names) // 2
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text((draft / "config.json").read_text())
    files = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for fname, keys in files.items():
        save_file({k: tensors[k] for k in keys}, str(sharded / fname))
        weight_map.update({k: fname for k in keys})
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    one = load(target, draft).engine.drafter.state_dict()
    two = load(target, sharded).engine.drafter.state_dict()
    assert one.keys() == two.keys()
    assert all(torch.equal(one[k], two[k]) for k in one)
    # a shard named by the index but absent is a clear error, not a silent partial load
    (sharded / "model-00002-of-00002.safetensors").unlink()
    expect(target, sharded, CheckpointError, "model-00002-of-00002.safetensors")
