"""SPARKDEC_* switches from the environment, checked: a bad value is an error that names the variable and its values."""
from __future__ import annotations

import os

from sparkdec.errors import SparkdecError


class InvalidSettingError(SparkdecError, ValueError):
    """An environment switch has a value it does not take."""


def choice(name: str, default: int, allowed: tuple[int, ...]) -> int:
    """An integer switch: one of `allowed`; unset or empty: default."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw.lstrip("-").isdigit() and int(raw) in allowed:
        return int(raw)
    raise InvalidSettingError(f"{name}={raw!r} is not a valid value; use one of {', '.join(map(str, allowed))} "
                              f"(or unset it for the default, {default})")


def flag(name: str, default: bool) -> bool:
    """An on/off switch: 1 or 0; unset or empty: default."""
    return bool(choice(name, int(default), (0, 1)))
