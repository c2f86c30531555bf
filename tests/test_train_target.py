"""Target recipe on CPU at toy scale: tokenised streams, a few training steps, and a checkpoint that loads strictly
in sparkdec and in Hugging Face transformers with the tokenizer's EOS ids."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sparkdec.train.corpus import build_corpus
from sparkdec.train.target import TargetRecipe, lr_at, tokenize_corpus, train_target, train_val_streams
from sparkdec.train.tokenizer import special_token_ids, train_tokenizer

CODE = "def add(a, b):\n    \"\"\"Sum.\"\"\"\n    return a + b\n\n\nclass Box:\n    def __init__(self, x):\n        self.x = x\n"
PROSE = "The module provides functions for working with paths. Each call returns a new string.\n\n"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("tdata")
    for i in range(40):
        (root / "code").mkdir(exist_ok=True)
        (root / "code" / f"m{i}.py").write_text(f"X{i} = {i}\n" + CODE * (1 + i % 3))
        (root / "prose").mkdir(exist_ok=True)
        (root / "prose" / f"p{i}.txt").write_text(f"Page {i}.\n" + PROSE * (1 + i % 4))
    build_corpus(root / "corpus", code_root=root / "code", prose_root=root / "prose")
    train_tokenizer(root / "corpus", root / "tok", vocab_size=400)
    counts = tokenize_corpus(root / "corpus", root / "tok", root / "tokens")
    return root, counts


def test_tokenize_corpus_streams(data):
    root, counts = data
    assert counts["train_code"]["tokens"] > 100 and counts["heldout_prose"]["docs"] >= 0
    stream = np.load(root / "tokens" / "train_code.npy")
    assert stream.dtype == np.uint16 and stream[-1] == 0  # documents end with <|endoftext|>
    train, val = train_val_streams(root / "tokens")
    assert set(val) == {"code", "prose"} and len(train) > 0


def test_lr_schedule():
    assert lr_at(0.0, 1.0, 0.1, 0.1) == pytest.approx(0.01)
    assert lr_at(0.1, 1.0, 0.1, 0.1) == pytest.approx(1.0)
    assert lr_at(1.0, 1.0, 0.1, 0.1) == pytest.approx(0.1)
    assert lr_at(0.55, 1.0, 0.1, 0.1) == pytest.approx(0.55)


def test_train_target_saves_a_loadable_checkpoint(data, tmp_path):
    root, _ = data
    recipe = TargetRecipe(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=16, intermediate_size=64, seq_len=32, batch_size=2, seconds=1e9, max_steps=3,
                          eval_every_s=1e9)
    out = train_target(root / "tokens", root / "tok", tmp_path / "target", recipe, device="cpu", log=lambda *_: None)
    assert out["steps"] == 3 and np.isfinite(out["best_val_loss"])
    folder = tmp_path / "target"
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3ForCausalLM"] and cfg["tie_word_embeddings"] and cfg["dtype"] == "bfloat16"
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == [0, 2]
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        assert all(f.get_tensor(k).dtype == torch.bfloat16 for k in f.keys())

    from transformers import Qwen3ForCausalLM

    from sparkdec.engine.context import build_context
    from sparkdec.engine.kv_cache import KVCache
    from sparkdec.models.loader import load_target
    from sparkdec.tokenizer import Tokenizer

    model, tcfg = load_target(folder, "cpu", "float32")  # strict: every tensor, no leftovers
    hf = Qwen3ForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    ids = torch.tensor([[5, 9, 17, 33, 40, 41]])
    kv = KVCache(tcfg.num_hidden_layers, 4, 16, tcfg.num_key_value_heads, tcfg.head_dim, torch.float32, "cpu")
    model.setup_rope(64, "cpu")
    ctx = build_context([([0, 1], list(range(6)), False)], 16, "cpu")
    with torch.no_grad():
        hidden, _ = model(ids[0], ctx, kv.layers)
        torch.testing.assert_close(model.logits(hidden), hf(ids).logits[0], atol=1e-4, rtol=1e-4)
    tok = Tokenizer(folder)
    assert tok.eos_token_ids[:2] == (0, 2)
    assert tok.token_to_id("<|mask|>") == special_token_ids(tok._tok).mask
