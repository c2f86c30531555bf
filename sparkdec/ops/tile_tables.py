"""Tile tables of the CUDA products: {"N,K": [settings...]} JSON files, shipped beside the kernels or named by a
SPARKDEC_* variable."""
from __future__ import annotations

import json
import os
import pathlib

from sparkdec.env import InvalidSettingError


def read_table(path, env_var: str, shipped: pathlib.Path, what: str, writer: str) -> dict[tuple[int, int], tuple]:
    """{(N, K): tuple(settings)} from `path`, else $env_var, else the shipped file (absent: {}). A table the user
    named must exist and parse; the error names the variable and the script that writes the format."""
    chosen = path or os.environ.get(env_var)
    path = chosen or shipped
    if not os.path.exists(path):
        if chosen:  # NOTE: a table the user named must exist; silently using the shipped one would hide the typo
            raise InvalidSettingError(f"{what} {str(path)!r} ({env_var}) does not exist; give the JSON that "
                                      f"{writer} wrote, or unset it")
        return {}
    try:
        with open(path) as f:
            table = json.load(f)
    except json.JSONDecodeError as exc:
        raise InvalidSettingError(f"{what} {str(path)!r} is not valid JSON ({exc}); use the file {writer} "
                                  "writes") from exc
    table = table.get("configs", table)  # {"note": ..., "configs": {...}} or the bare map
    return {tuple(int(v) for v in key.split(",")): tuple(cfg) for key, cfg in table.items() if "," in key}
