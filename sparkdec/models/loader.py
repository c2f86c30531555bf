"""Checkpoint loading: detect the format, validate it, and load every tensor strictly."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from sparkdec.config import TARGET_ARCHITECTURES, TargetConfig, read_config_json
from sparkdec.errors import CheckpointError, UnsupportedArchitectureError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise CheckpointError(f"dtype {name!r} is not supported; use one of float32, bfloat16, float16")
    return DTYPES[name]


def safetensors_files(folder: Path) -> list[Path]:
    """The checkpoint's shard files, from model.safetensors.index.json or the folder listing."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CheckpointError(f"{folder}: shards {missing} named in model.safetensors.index.json are missing")
        return [folder / n for n in names]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{folder} holds no *.safetensors file; sparkdec loads safetensors checkpoints only")
    return files


def read_tensors(folder: Path, skip_prefixes: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    tensors = {}
    for file in safetensors_files(folder):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                if not key.startswith(skip_prefixes):
                    tensors[key] = f.get_tensor(key)
    return tensors


def load_state_strict(module: torch.nn.Module, tensors: dict[str, torch.Tensor], where: str,
                      optional: tuple[str, ...] = ()) -> None:
    """Copy tensors into module parameters; every parameter loaded, no key left over, shapes equal."""
    params = dict(module.named_parameters(remove_duplicate=True))
    missing = [k for k in params if k not in tensors and k not in optional]
    unexpected = [k for k in tensors if k not in params]
    if missing or unexpected:
        raise CheckpointError(f"{where}: checkpoint does not match the model. missing tensors: {missing[:8]}"
                              f"{' ...' if len(missing) > 8 else ''}; unexpected tensors: {unexpected[:8]}"
                              f"{' ...' if len(unexpected) > 8 else ''}. Is this the right checkpoint for its config.json?")
    for name, param in params.items():
        if name not in tensors:
            continue
        src = tensors[name]
        if tuple(src.shape) != tuple(param.shape):
            raise CheckpointError(f"{where}: tensor {name} has shape {tuple(src.shape)}, config.json implies "
                                  f"{tuple(param.shape)}; the config and weights disagree")
        with torch.no_grad():
            param.copy_(src.to(param.dtype))


def load_target(path: str | Path, device: torch.device | str = "cpu", dtype: str | torch.dtype | None = None):
    """Load a Hugging Face Qwen3ForCausalLM folder -> (model in eval mode on device, TargetConfig)."""
    from sparkdec.models.qwen3 import Qwen3ForCausalLM

    folder = Path(path).expanduser()
    raw = read_config_json(folder)
    archs = raw.get("architectures") or []
    if not any(a in TARGET_ARCHITECTURES for a in archs):
        raise UnsupportedArchitectureError(
            f"{folder}: architectures {archs} are not supported as a target; sparkdec runs "
            f"{', '.join(TARGET_ARCHITECTURES)} (dense Qwen3). For a drafter pass it with --draft.")
    cfg = TargetConfig.from_hf(raw)
    torch_dtype = parse_dtype(dtype or ("float32" if str(device) == "cpu" else "bfloat16"))
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    model = model.to_empty(device=device).to(torch_dtype)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    tensors = read_tensors(folder)
    if cfg.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    load_state_strict(model, tensors, str(folder))
    return model.eval(), cfg
