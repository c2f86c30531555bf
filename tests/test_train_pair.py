"""The shipped sparkdec-tiny pair: formats, size budget, the default of LLM(), and real speculative acceptance
with greedy output identical to plain decoding."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

PAIR = Path(__file__).resolve().parents[1] / "models" / "sparkdec-tiny"
pytestmark = pytest.mark.skipif(not (PAIR / "draft" / "model.safetensors").is_file(), reason="no shipped pair")
CODE_PROMPT = "def read_config(path):\n    \"\"\"Read a JSON configuration file and return a dict.\"\"\"\n"


def test_pair_fits_the_size_budget():
    total = sum(p.stat().st_size for p in PAIR.rglob("*") if p.is_file())
    assert total <= 32 * 2 ** 20


def test_target_loads_in_transformers_and_matches_sparkdec():
    from transformers import Qwen3ForCausalLM

    from sparkdec.engine.context import build_context
    from sparkdec.engine.kv_cache import KVCache
    from sparkdec.models.loader import load_target
    from sparkdec.tokenizer import Tokenizer

    tok = Tokenizer(PAIR / "target")
    ids = tok.encode(CODE_PROMPT)
    hf = Qwen3ForCausalLM.from_pretrained(str(PAIR / "target"), dtype=torch.float32).eval()
    model, cfg = load_target(PAIR / "target", "cpu", "float32")
    model.setup_rope(128, "cpu")
    kv = KVCache(cfg.num_hidden_layers, 8, 16, cfg.num_key_value_heads, cfg.head_dim, torch.float32, "cpu")
    ctx = build_context([(list(range(8)), list(range(len(ids))), False)], 16, "cpu")
    with torch.no_grad():
        hidden, _ = model(torch.tensor(ids), ctx, kv.layers)
        torch.testing.assert_close(model.logits(hidden), hf(torch.tensor([ids])).logits[0], atol=2e-3, rtol=1e-3)
    assert tok.eos_token_ids[:2] == (0, 2)


def test_drafter_is_deepspec_format():
    from safetensors import safe_open

    cfg = json.loads((PAIR / "draft" / "config.json").read_text())
    tcfg = json.loads((PAIR / "target" / "config.json").read_text())
    tok = json.loads((PAIR / "target" / "tokenizer_config.json").read_text())
    assert cfg["architectures"] == ["Qwen3DSparkModel"] and cfg["block_size"] == 7 and cfg["num_anchors"] == 512
    assert cfg["markov_head_type"] == "vanilla" and cfg["markov_rank"] > 0
    assert cfg["enable_confidence_head"] and cfg["confidence_head_with_markov"] and not cfg["tie_word_embeddings"]
    assert cfg["num_target_layers"] == tcfg["num_hidden_layers"] and 2 <= len(cfg["target_layer_ids"]) <= 3
    assert max(cfg["target_layer_ids"]) < tcfg["num_hidden_layers"] - 1
    mask = [int(i) for i, t in tok["added_tokens_decoder"].items() if t["content"] == "<|mask|>"]
    assert cfg["mask_token_id"] == mask[0]
    index = json.loads((PAIR / "target" / "model.safetensors.index.json").read_text())  # the target is sharded
    shard = PAIR / "target" / index["weight_map"]["model.embed_tokens.weight"]
    with safe_open(str(PAIR / "draft" / "model.safetensors"), "pt") as f, safe_open(str(shard), "pt") as t:
        keys = set(f.keys())
        assert {"fc.weight", "hidden_norm.weight", "norm.weight", "markov_head.markov_w1.weight",
                "markov_head.markov_w2.weight", "confidence_head.proj.weight", "confidence_head.proj.bias"} <= keys
        embed = t.get_tensor("model.embed_tokens.weight")
        assert torch.equal(f.get_tensor("embed_tokens.weight"), embed)  # DeepSpec's frozen copies
        assert torch.equal(f.get_tensor("lm_head.weight"), embed)
        assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in keys)


def test_default_llm_speculates_with_real_acceptance_and_plain_greedy_output():
    from sparkdec import LLM, SamplingParams

    llm = LLM()  # no model: the shipped pair
    params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)
    spec = llm.generate(CODE_PROMPT, params, trace=True)[0]
    plain = llm.generate(CODE_PROMPT, SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True,
                                                     speculative=False))[0]
    assert spec.token_ids == plain.token_ids
    assert spec.stats["mean_acceptance_length"] >= 1.8  # a slot/tap/visibility bug gives about 1
    assert all(0.0 <= c <= 1.0 for r in spec.rounds for c in r["confidence"])
