"""Test helpers: small random checkpoints written in the real formats (HF Qwen3, DeepSpec DSpark)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

GEOMETRIES = {
    "tied_gqa2": dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True),
    "untied_gqa4_odd_vocab": dict(vocab_size=509, hidden_size=96, intermediate_size=160, num_hidden_layers=4,
                                  num_attention_heads=8, num_key_value_heads=2, head_dim=24, tie_word_embeddings=False),
    "untied_mha": dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=4, head_dim=32, tie_word_embeddings=False),
}


def make_target(folder: Path, seed: int = 0, dtype=torch.float32, **geometry) -> Path:
    """Write a random Qwen3ForCausalLM checkpoint with transformers' own save_pretrained."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(**{"max_position_embeddings": 1024, "rope_theta": 10000.0, "rms_norm_eps": 1e-6, **geometry})
    model = Qwen3ForCausalLM(cfg).to(dtype)
    with torch.no_grad():  # larger weights than HF's init give peaked, non-degenerate distributions
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.08 if "embed" not in name else 1.0)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def make_draft(folder: Path, target_dir: Path, seed: int = 0, block_size: int = 4, markov_rank: int = 16,
               markov_head_type: str = "vanilla", confidence: bool = True, with_markov: bool = True,
               taps: list[int] | None = None, num_layers: int = 2, extra: dict | None = None,
               mask_token_id: int | None = None) -> Path:
    """Write a random DeepSpec-format Qwen3DSparkModel drafter for the target at target_dir."""
    tcfg = json.loads((target_dir / "config.json").read_text())
    d, v, n = tcfg["hidden_size"], tcfg["vocab_size"], tcfg["num_hidden_layers"]
    hq, hkv, hd, inter = tcfg["num_attention_heads"], tcfg["num_key_value_heads"], tcfg["head_dim"], tcfg["intermediate_size"]
    taps = taps if taps is not None else list(range(0, n - 1))[:3]
    cfg = dict(tcfg)
    cfg.update(architectures=["Qwen3DSparkModel"], num_hidden_layers=num_layers, num_target_layers=n,
               target_layer_ids=taps, block_size=block_size, mask_token_id=v - 1 if mask_token_id is None else mask_token_id,
               num_anchors=512, layer_types=["full_attention"] * num_layers, markov_rank=markov_rank,
               markov_head_type=markov_head_type, enable_confidence_head=confidence,
               confidence_head_with_markov=with_markov and confidence and markov_rank > 0, tie_word_embeddings=False)
    cfg.update(extra or {})
    g = torch.Generator().manual_seed(seed)

    def w(*shape, scale=0.08):
        return (torch.randn(*shape, generator=g) * scale).contiguous()

    t = {"fc.weight": w(d, len(taps) * d), "hidden_norm.weight": torch.ones(d), "norm.weight": torch.ones(d),
         "embed_tokens.weight": w(v, d), "lm_head.weight": w(v, d)}
    for i in range(num_layers):
        p = f"layers.{i}."
        t.update({p + "input_layernorm.weight": torch.ones(d), p + "post_attention_layernorm.weight": torch.ones(d),
                  p + "self_attn.q_proj.weight": w(hq * hd, d), p + "self_attn.k_proj.weight": w(hkv * hd, d),
                  p + "self_attn.v_proj.weight": w(hkv * hd, d), p + "self_attn.o_proj.weight": w(d, hq * hd),
                  p + "self_attn.q_norm.weight": torch.ones(hd), p + "self_attn.k_norm.weight": torch.ones(hd),
                  p + "mlp.gate_proj.weight": w(inter, d), p + "mlp.up_proj.weight": w(inter, d),
                  p + "mlp.down_proj.weight": w(d, inter)})
    r = markov_rank
    if r:
        t.update({"markov_head.markov_w1.weight": w(v, r, scale=1.0), "markov_head.markov_w2.weight": w(v, r, scale=0.3)})
        if markov_head_type == "gated":
            t.update({"markov_head.gate_proj.weight": w(r, d + r), "markov_head.gate_proj.bias": w(r)})
        if markov_head_type == "rnn":
            t.update({"markov_head.joint_proj.weight": w(3 * r, 2 * r + d), "markov_head.joint_proj.bias": w(3 * r)})
    if confidence:
        width = d + (r if cfg["confidence_head_with_markov"] else 0)
        t.update({"confidence_head.proj.weight": w(1, width), "confidence_head.proj.bias": w(1)})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file(t, str(folder / "model.safetensors"))
    return folder


def make_bigram_draft(folder: Path, target_dir: Path, sequences: list[list[int]], block_size: int = 5,
                      confidence: bool = False) -> Path:
    """A drafter that knows the target's habits: its Markov head holds the most frequent next token after each
    token in `sequences` (the target's own greedy outputs), and its backbone contributes nothing (norm = 0),
    so z_k = 30 * onehot(next(prev)). Gives real acceptance on random targets without training. confidence: with a
    (random) confidence head."""
    from collections import Counter, defaultdict

    from safetensors.torch import load_file

    make_draft(folder, target_dir, block_size=block_size, markov_rank=0, confidence=confidence)
    v = json.loads((target_dir / "config.json").read_text())["vocab_size"]
    follows: dict[int, Counter] = defaultdict(Counter)
    for seq in sequences:
        for a, b in zip(seq, seq[1:]):
            follows[a][b] += 1
    t = load_file(str(folder / "model.safetensors"))
    t["norm.weight"] = torch.zeros_like(t["norm.weight"])
    w1, w2 = torch.eye(v), torch.zeros(v, v)
    for a, counter in follows.items():
        w2[counter.most_common(1)[0][0], a] = 30.0
    t["markov_head.markov_w1.weight"], t["markov_head.markov_w2.weight"] = w1, w2
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(markov_rank=v, markov_head_type="vanilla")
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file(t, str(folder / "model.safetensors"))
    return folder


def staggered(engine, first: tuple, second: tuple, steps: int = 4) -> tuple[list[int], list[int]]:
    """Run (prompt, params) first alone for `steps` engine steps, then let second join: -> both outputs."""
    a = engine.add_request(*first)
    for _ in range(steps):
        engine.step()
    b = engine.add_request(*second)
    while engine.has_unfinished():
        engine.step()
    return a.output_ids, b.output_ids
