"""Real model shapes (Qwen3-4B, Qwen3-8B, their released DSpark drafters) with random bf16 weights on the device."""
from __future__ import annotations

from dataclasses import replace

import torch

from sparkdec.config import DraftConfig, TargetConfig

SHAPES = {
    "qwen3-4b": TargetConfig(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                             num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                             rope_theta=1e6, max_position_embeddings=40960, tie_word_embeddings=True, dtype="bfloat16"),
    "qwen3-8b": TargetConfig(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                             num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                             rope_theta=1e6, max_position_embeddings=40960, tie_word_embeddings=False, dtype="bfloat16"),
}


def released_draft_config(target: TargetConfig) -> DraftConfig:
    """The deepseek-ai/dspark_qwen3_*_block7 geometry: 5 layers, γ = 7, vanilla Markov rank 256."""
    return DraftConfig(layers=replace(target, num_hidden_layers=5), num_target_layers=target.num_hidden_layers,
                       target_layer_ids=(1, 9, 17, 25, 33), block_size=7, mask_token_id=151669, markov_rank=256,
                       markov_head_type="vanilla", enable_confidence_head=True, confidence_head_with_markov=True)


@torch.no_grad()
def _randomize(module: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for name, p in module.named_parameters():
        if p.dim() == 1 and "bias" not in name:
            p.fill_(1.0)
        else:
            p.normal_(0.0, 0.02, generator=gen)


def random_models(shape: str, device="cuda", with_draft: bool = True):
    """-> (target, cfg, drafter, draft_cfg, None) in bf16 on the device, ready for Engine(models=...)."""
    from sparkdec.models.dspark import DSparkDrafter
    from sparkdec.models.qwen3 import Qwen3ForCausalLM

    cfg = SHAPES[shape]
    with torch.device("meta"):
        target = Qwen3ForCausalLM(cfg)
    target = target.to_empty(device=device).to(torch.bfloat16)
    if cfg.tie_word_embeddings:
        target.lm_head.weight = target.model.embed_tokens.weight
    _randomize(target, 0)
    drafter, dcfg = None, None
    if with_draft:
        dcfg = released_draft_config(cfg)
        with torch.device("meta"):
            drafter = DSparkDrafter(dcfg)
        drafter = drafter.to_empty(device=device).to(torch.bfloat16)
        _randomize(drafter, 1)
        drafter.confidence_head.float()
        drafter.share_target(target)
    return target.eval(), cfg, (drafter.eval() if drafter else None), dcfg, None


def param_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())
