"""Frozen model configurations read from Hugging Face (target) and DeepSpec (drafter) config.json files."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sparkdec.errors import CheckpointError, ModelNotFoundError

TARGET_ARCHITECTURES = ("Qwen3ForCausalLM",)


def read_config_json(path: str | Path) -> dict:
    """Read `path/config.json`, with errors that say which path was wrong."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ModelNotFoundError(f"model path {folder} does not exist; pass a folder holding config.json "
                                 "and *.safetensors (a Hugging Face checkpoint)")
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise ModelNotFoundError(f"{folder} has no config.json; pass the checkpoint folder itself "
                                 "(the one with config.json and *.safetensors)")
    try:
        return json.loads((folder / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{folder}/config.json is not valid JSON ({exc}); re-download the checkpoint") from exc


def _rope_theta(cfg: dict) -> float:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ("default", None):
        raise CheckpointError(f"rope type {rope_type!r} is not supported; sparkdec runs default RoPE only")
    theta = params.get("rope_theta", cfg.get("rope_theta"))
    if theta is None:
        raise CheckpointError("config.json gives no rope_theta (top level or in rope_parameters)")
    return float(theta)


def _require(cfg: dict, key: str, where: str):
    if key not in cfg:
        raise CheckpointError(f"{where} config.json lacks {key!r}; the checkpoint is incomplete")
    return cfg[key]


@dataclass(frozen=True)
class TargetConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    dtype: str = "float32"

    @classmethod
    def from_hf(cls, cfg: dict) -> "TargetConfig":
        heads = int(_require(cfg, "num_attention_heads", "target"))
        hidden = int(_require(cfg, "hidden_size", "target"))
        if cfg.get("hidden_act", "silu") != "silu":
            raise CheckpointError(f"hidden_act {cfg['hidden_act']!r} is not supported (Qwen3 uses silu)")
        if cfg.get("attention_bias", False):
            raise CheckpointError("attention_bias=true is not supported (Qwen3 has no attention bias)")
        return cls(
            vocab_size=int(_require(cfg, "vocab_size", "target")),
            hidden_size=hidden,
            intermediate_size=int(_require(cfg, "intermediate_size", "target")),
            num_hidden_layers=int(_require(cfg, "num_hidden_layers", "target")),
            num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads", heads)),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=_rope_theta(cfg),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 32768)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            dtype=str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32"),
        )


@dataclass(frozen=True)
class DraftConfig:
    """A DSpark drafter: a Qwen3-shaped block model plus Markov and confidence heads."""

    layers: TargetConfig  # geometry of the draft layers (num_hidden_layers = draft depth)
    num_target_layers: int
    target_layer_ids: tuple[int, ...]
    block_size: int
    mask_token_id: int
    markov_rank: int
    markov_head_type: str
    enable_confidence_head: bool
    confidence_head_with_markov: bool

    @property
    def num_taps(self) -> int:
        return len(self.target_layer_ids)
