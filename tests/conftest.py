"""Shared fixtures: small random checkpoints in the real formats, built once per session."""
from __future__ import annotations

import pytest
import torch

from helpers import GEOMETRIES, make_target
from sparkdec.engine import llm_engine


# NOTE: tiny models are dominated by per-op overhead; one thread avoids oversubscribing a 2-core machine
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def targets(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("targets")
    return {name: make_target(root / name, seed=i, **geo) for i, (name, geo) in enumerate(GEOMETRIES.items())}


# NOTE: the speculation bypass (spec/bypass.py) chooses rounds from measured timings; tests compare rounds, so it is
# off here unless a test turns it on (tests/test_bypass.py)
llm_engine.BYPASS_DEFAULT = False
