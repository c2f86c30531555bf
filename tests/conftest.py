"""Shared fixtures: small random checkpoints in the real formats, built once per session."""
from __future__ import annotations

import pytest

from helpers import GEOMETRIES, make_target


@pytest.fixture(scope="session")
def targets(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("targets")
    return {name: make_target(root / name, seed=i, **geo) for i, (name, geo) in enumerate(GEOMETRIES.items())}
