"""The A/B harness on the shipped pair: both legs emit identical greedy outputs and report per-category AL."""
from __future__ import annotations

import json

from sparkdec.bench.speed import main


def test_speed_harness_reports_identical_outputs(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in [{"category": "code", "prompt": "def parse(line):\n"},
                                                          {"category": "prose", "prompt": "The module provides"}]))
    res = main({}, str(prompts), [2], max_tokens=24, temperature=0.0, seed=0)
    row = res["results"][0]
    assert row["identical_outputs"] and row["concurrency"] == 2
    assert set(row["acceptance_length"]) == {"code", "prose"} and all(v >= 1 for v in row["acceptance_length"].values())
    assert row["plain_tokens_per_s"] > 0 and row["spec_tokens_per_s"] > 0
