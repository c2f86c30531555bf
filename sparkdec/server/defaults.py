"""Request sampling defaults from a model's generation_config.json (`serve --generation-config`, vLLM's rule): the
fields a request leaves out take the model's recommended values, where it gives them."""
from __future__ import annotations

import json
from pathlib import Path

from sparkdec.errors import InvalidSamplingParamsError
from sparkdec.sampling import SamplingParams

# the fields read (vLLM's; do_sample is not: like vLLM, a model's temperature applies even where it says false)
FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
BUILTIN = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}  # (OpenAI's)


def load_defaults(setting: str, model_folder: Path | None) -> tuple[dict, Path | None]:
    """--generation-config: "auto" (the model folder's generation_config.json, if it has one), "none" (the
    OpenAI defaults, BUILTIN), or a folder or file -> (the fields it sets, the file read or None). A value
    SamplingParams refuses is an error that names the file and the field."""
    if setting == "none":
        return {}, None
    if setting == "auto":
        path = model_folder / "generation_config.json" if model_folder is not None else None
        if path is None or not path.is_file():
            return {}, None
    else:
        path = Path(setting).expanduser()
        path = path / "generation_config.json" if path.is_dir() else path
        if not path.is_file():
            raise SystemExit(f"sparkdec serve: --generation-config {setting!r}: no such file or folder with a "
                             "generation_config.json; pass auto, none or the folder that holds one")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"sparkdec serve: {path} is not readable JSON ({exc}); fix it or pass "
                         "--generation-config none") from None
    found = {name: _top_k(config[name]) if name == "top_k" else config[name]
             for name in FIELDS if config.get(name) is not None}
    try:
        for name, value in found.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidSamplingParamsError(f"{name} must be a number, got {value!r}")
        SamplingParams(**found)  # (validates)
    except InvalidSamplingParamsError as exc:
        raise SystemExit(f"sparkdec serve: {path}: {exc}; fix the file or pass --generation-config none") from None
    return found, path


def _top_k(value) -> int:
    """A top-k as a config or request writes it: -1 (vLLM) and 0 (HF) both keep every token."""
    return 0 if value == -1 else value


def pick(value, name: str, defaults: dict | None):
    """A request's field: its own value, else the model's default, else the OpenAI one."""
    if value is not None:
        return _top_k(value) if name == "top_k" else value
    return (defaults or {}).get(name, BUILTIN[name])
