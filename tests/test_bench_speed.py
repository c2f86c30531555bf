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


def test_bad_prompt_files_are_refused_with_the_line(tmp_path):
    import pytest

    from sparkdec.bench.speed import load_prompts
    from sparkdec.errors import SparkdecError

    for text, words in (("", "no prompts"), ('{"prompt": "x"}\n[1]\n', "line 2 has no \"prompt\" text"),
                        ('{"prompt": "x"}\n{"prompt": \n', "line 2 is not JSON")):
        (tmp_path / "p.jsonl").write_text(text)
        with pytest.raises(SparkdecError, match=words):
            load_prompts(str(tmp_path / "p.jsonl"))
    with pytest.raises(SparkdecError, match="cannot read it"):
        load_prompts(str(tmp_path / "missing.jsonl"))


def test_propose_floor_counts_what_the_propose_reads():
    """bench kernels' propose floor: the drafter's layers, norm and heads, the LM head once and W2 once per slot;
    not fc / hidden_norm (the verify graph's context write reads them) and not W1 (rows are gathered); the context
    K/V of the draft layers at the bench's context."""
    from sparkdec.bench.kernels import propose_floor_bytes
    from sparkdec.engine.llm_engine import DEFAULT_PAIR, Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(DEFAULT_PAIR / "target"), draft=str(DEFAULT_PAIR / "draft"), device="cpu"))
    d = eng.drafter
    size = lambda mods: sum(p.numel() * p.element_size() for m in mods for p in m.parameters())
    read = size([*d.layers, d.norm, d.confidence_head]) + size([eng.target.lm_head])
    w2 = d.markov_head.markov_w2.weight
    assert propose_floor_bytes(eng) == read + eng.draft_cfg.block_size * w2.numel() * w2.element_size()
    lc = eng.draft_cfg.layers  # and the draft layers' context K/V at ctx positions
    kv = 2 * lc.num_hidden_layers * lc.num_key_value_heads * lc.head_dim * 4 * 1000  # float32 on the CPU
    assert propose_floor_bytes(eng, 1000) == propose_floor_bytes(eng) + kv


def test_a_timed_plain_request_launches_one_forward_per_decoded_token(monkeypatch):
    """bench kernels' plain decode figure: a whole request (prompt's pass + 8 decode steps) with lookahead on, so the
    timed window holds 8 forwards, none queued past the request's limit."""
    from sparkdec.bench.kernels import request_ms, warm_request_ms
    from sparkdec.engine.llm_engine import DEFAULT_PAIR, Engine, EngineConfig

    eng = Engine(EngineConfig(model=str(DEFAULT_PAIR / "target"), device="cpu"))
    forwards = []
    real = eng.runner.decode_tokens
    monkeypatch.setattr(eng.runner, "decode_tokens", lambda *a, **k: forwards.append(1) or real(*a, **k))
    assert request_ms(eng, 12, 8, seed=0) > 0 and len(forwards) == 8
    assert request_ms(eng, 12, 5, seed=1, sampling=dict(temperature=0.8, top_p=0.95, seed=7)) > 0
    assert len(forwards) == 8 + 5
    # the sampled and processed figures: a short untimed request of the same kind first (lazy compiles outside)
    assert warm_request_ms(eng, 12, 5, 1, dict(temperature=0.8, seed=7)) > 0 and len(forwards) == 8 + 5 + 8 + 5
    assert not eng.has_unfinished()


def test_the_floors_follow_the_copy_bandwidth_they_are_given():
    """bench kernels' floors: bytes over bandwidth, and every figure against them recomputed from the bytes, so the
    run's end can re-apply the higher of its two bandwidth readings."""
    from sparkdec.bench.kernels import apply_floors

    run = {"weight_bytes": 8e9, "kv_bytes": 2e8, "plain_decode_ms": 2.5, "propose_floor_bytes": 2e9, "propose_ms": 0.8,
           "propose_device_ms": 0.6}
    apply_floors(run, 4.1e12)
    assert abs(run["floor_ms"] - 8.2e9 / 4.1e12 * 1e3) < 1e-12 and abs(run["fraction_of_floor"] - 0.8) < 1e-12
    low = run["fraction_of_floor"]
    apply_floors(run, 4.3e12)
    assert run["fraction_of_floor"] < low and abs(run["propose_floor_ms"] - 2e9 / 4.3e12 * 1e3) < 1e-12
    assert abs(run["propose_over_floor"] * run["propose_floor_ms"] - 0.8) < 1e-12
    assert abs(run["propose_device_over_floor"] * run["propose_floor_ms"] - 0.6) < 1e-12
