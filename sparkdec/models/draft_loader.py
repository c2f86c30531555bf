"""DeepSpec-format DSpark drafter loading: recognise foreign formats, validate against the target, load strictly."""
from __future__ import annotations

from pathlib import Path

import torch

from sparkdec.config import DraftConfig, TargetConfig, read_config_json
from sparkdec.errors import CheckpointError, DraftMismatchError, UnsupportedArchitectureError
from sparkdec.models.loader import load_state_strict, parse_dtype, read_tensors

MARKOV_TYPES = ("vanilla", "gated", "rnn")


def _refuse_foreign(raw: dict, folder: Path) -> None:
    archs = raw.get("architectures") or []
    if "speculators_model_type" in raw or "transformer_layer_config" in raw:
        raise UnsupportedArchitectureError(
            f"{folder} is a vllm-project/speculators checkpoint (speculators_model_type="
            f"{raw.get('speculators_model_type')!r}); its taps and slot convention differ. sparkdec loads "
            "DeepSpec-format drafters (architectures [\"Qwen3DSparkModel\"]).")
    if "DFlashDraftModel" in archs or "dflash_config" in raw:
        raise UnsupportedArchitectureError(
            f"{folder} is a z-lab DFlash / legacy DSparkDraftModel checkpoint (slot 0 is not a prediction); "
            "sparkdec loads DeepSpec-format drafters (Qwen3DSparkModel). Convert it first.")
    if any(k.startswith("dspark_") for k in raw):
        raise UnsupportedArchitectureError(
            f"{folder} is a DeepSeek-V4 checkpoint with an in-checkpoint DSpark drafter (dspark_* keys); "
            "sparkdec serves dense Qwen3 targets with separate Qwen3DSparkModel drafters.")
    if archs != ["Qwen3DSparkModel"]:
        raise UnsupportedArchitectureError(
            f"{folder}: architectures {archs} is not a supported drafter; expected [\"Qwen3DSparkModel\"] "
            "(DeepSpec format, e.g. deepseek-ai/dspark_qwen3_4b_block7).")


def draft_config(raw: dict, target: TargetConfig, folder: Path) -> DraftConfig:
    _refuse_foreign(raw, folder)
    for key in ("target_layer_ids", "mask_token_id", "num_anchors", "markov_rank", "block_size",
                "enable_confidence_head"):
        if key not in raw:
            raise CheckpointError(f"{folder}/config.json lacks {key!r}, required by the DeepSpec format")
    layers = TargetConfig.from_hf(raw)
    taps = tuple(int(t) for t in raw["target_layer_ids"])
    n_target = int(raw.get("num_target_layers", target.num_hidden_layers))
    rank = int(raw["markov_rank"])
    conf = bool(raw["enable_confidence_head"])
    if rank > 0 and "markov_head_type" not in raw:
        raise CheckpointError(f"{folder}/config.json has markov_rank {rank} but no markov_head_type "
                              "(vanilla, gated or rnn); the DeepSpec format requires it")
    with_markov = bool(raw.get("confidence_head_with_markov", conf and rank > 0))
    cfg = DraftConfig(
        layers=layers, num_target_layers=n_target, target_layer_ids=taps, block_size=int(raw["block_size"]),
        mask_token_id=int(raw["mask_token_id"]), markov_rank=rank,
        markov_head_type=str(raw.get("markov_head_type", "vanilla")), enable_confidence_head=conf,
        confidence_head_with_markov=with_markov and conf)
    validate_against_target(cfg, target, raw, folder)
    return cfg


def validate_against_target(cfg: DraftConfig, target: TargetConfig, raw: dict, folder: Path) -> None:
    def bad(msg: str):
        raise DraftMismatchError(f"drafter {folder} does not fit the target: {msg}")

    lc = cfg.layers
    if lc.hidden_size != target.hidden_size:
        bad(f"hidden_size {lc.hidden_size} != target's {target.hidden_size}")
    for key in ("num_attention_heads", "num_key_value_heads", "head_dim", "rope_theta"):
        if getattr(lc, key) != getattr(target, key):
            bad(f"{key} {getattr(lc, key)} != target's {getattr(target, key)} (draft layers use the target's geometry)")
    if lc.vocab_size != target.vocab_size:
        bad(f"vocab_size {lc.vocab_size} != target's {target.vocab_size}")
    if cfg.num_target_layers != target.num_hidden_layers:
        bad(f"num_target_layers {cfg.num_target_layers} != target's num_hidden_layers {target.num_hidden_layers}")
    taps = cfg.target_layer_ids
    if not taps or list(taps) != sorted(set(taps)):
        bad(f"target_layer_ids {list(taps)} must be non-empty and strictly increasing")
    if taps[0] < -1 or taps[-1] >= target.num_hidden_layers - 1:
        bad(f"target_layer_ids {list(taps)} must lie in -1..{target.num_hidden_layers - 2}: the target's last "
            "layer output is post-norm in training caches and must not be tapped")
    if cfg.block_size < 1:
        bad(f"block_size {cfg.block_size} must be >= 1")
    if not 0 <= cfg.mask_token_id < lc.vocab_size:
        bad(f"mask_token_id {cfg.mask_token_id} is outside the vocabulary (size {lc.vocab_size})")
    if any(t != "full_attention" for t in raw.get("layer_types", ["full_attention"])):
        bad(f"layer_types {raw.get('layer_types')} must all be full_attention for Qwen3 drafters")
    if cfg.markov_rank > 0 and cfg.markov_head_type not in MARKOV_TYPES:
        bad(f"markov_head_type {cfg.markov_head_type!r} is not one of {MARKOV_TYPES}")
    if cfg.confidence_head_with_markov and cfg.markov_rank == 0:
        bad("confidence_head_with_markov needs markov_rank > 0")


def load_draft(path: str | Path, target_model, target_cfg: TargetConfig, device="cpu",
               dtype: str | torch.dtype | None = None):
    """Load a Qwen3DSparkModel folder next to its (already loaded) target -> (drafter, DraftConfig)."""
    from sparkdec.models.dspark import DSparkDrafter

    folder = Path(path).expanduser()
    cfg = draft_config(read_config_json(folder), target_cfg, folder)
    with torch.device("meta"):
        drafter = DSparkDrafter(cfg)
    drafter = drafter.to_empty(device=device).to(parse_dtype(dtype or target_model.lm_head.weight.dtype))
    tensors = read_tensors(folder, skip_prefixes=("embed_tokens.", "lm_head.", "rotary_emb."))
    optional = ("confidence_head.proj.bias",)
    if "confidence_head.proj.bias" not in tensors and drafter.confidence_head is not None:
        with torch.no_grad():
            drafter.confidence_head.proj.bias.zero_()
    load_state_strict(drafter, tensors, str(folder), optional=optional)
    if drafter.confidence_head is not None:
        drafter.confidence_head.float()  # NOTE: the confidence head runs in float32 (spec §10.1)
    drafter.share_target(target_model)
    return drafter.eval(), cfg
