"""Runtime behaviour: batch invariance, continuous batching, chunked prefill, sampling, limits, errors."""
from __future__ import annotations

import pytest

from helpers import staggered as run_staggered
from sparkdec import LLM, SamplingParams
from sparkdec.errors import (CheckpointError, InvalidPromptError, InvalidSamplingParamsError, ModelNotFoundError,
                             PromptTooLongError, SparkdecError, UnsupportedArchitectureError)

MIXED = [[1, 2, 3], [5] * 30, list(range(10, 60)), [7, 8], list(range(100, 111)), [42] * 5, [9, 3, 9, 3, 9], list(range(200, 290))]


@pytest.fixture(scope="module")
def llm(targets):
    return LLM(model=str(targets["untied_gqa4_odd_vocab"]), device="cpu")


def run_alone(llm, prompt, params):
    return llm.generate([prompt], params)[0].token_ids


@pytest.mark.parametrize("params", [SamplingParams(max_tokens=40, ignore_eos=True),
                                    SamplingParams(max_tokens=40, ignore_eos=True, temperature=0.9, top_p=0.9, top_k=50, seed=7)])
def test_batch_invariance_with_mixed_lengths(llm, params):
    alone = run_alone(llm, MIXED[2], params)
    batch = llm.generate(MIXED, params)
    assert batch[2].token_ids == alone


def test_sequences_join_and_leave_mid_run(llm):
    params = SamplingParams(max_tokens=30, ignore_eos=True)
    alone = run_alone(llm, MIXED[0], params)
    eng = llm.engine
    target = eng.add_request(MIXED[0], params)
    short = [eng.add_request(p, SamplingParams(max_tokens=3 + i, ignore_eos=True)) for i, p in enumerate(MIXED[1:4])]
    joined = []
    steps = 0
    while eng.has_unfinished():
        eng.step()
        steps += 1
        if steps in (4, 9):  # new sequences join while others are finishing
            joined += [eng.add_request(p, SamplingParams(max_tokens=12, ignore_eos=True)) for p in MIXED[4:7]]
    assert target.output_ids == alone
    assert all(s.finished for s in short + joined)
    assert eng.blocks.num_free == eng.blocks.num_pages


def test_chunked_prefill_matches_one_shot(targets):
    params = SamplingParams(max_tokens=24, ignore_eos=True)
    long_prompt = list(range(1, 300))
    one = LLM(model=str(targets["tied_gqa2"]), max_batched_tokens=4096).generate([long_prompt], params)[0]
    chunked = LLM(model=str(targets["tied_gqa2"]), max_batched_tokens=37, max_num_seqs=1).generate([long_prompt], params)[0]
    assert chunked.token_ids == one.token_ids


def test_seeded_sampling_is_reproducible_and_seed_dependent(llm):
    p = lambda seed: SamplingParams(max_tokens=30, ignore_eos=True, temperature=1.0, seed=seed)
    a, b, c = (run_alone(llm, MIXED[3], p(s)) for s in (1, 1, 2))
    assert a == b and a != c


def test_max_tokens_and_stop_token_ids(llm):
    greedy = run_alone(llm, MIXED[4], SamplingParams(max_tokens=20, ignore_eos=True))
    assert len(greedy) == 20
    stop_at = greedy[5]
    out = llm.generate([MIXED[4]], SamplingParams(max_tokens=20, stop_token_ids=[stop_at]))[0]
    assert out.token_ids == greedy[:greedy.index(stop_at) + 1] and out.finish_reason == "stop"


def test_context_window_ends_generation_with_length(targets):
    llm = LLM(model=str(targets["tied_gqa2"]), max_model_len=40)
    out = llm.generate([list(range(1, 31))], SamplingParams(max_tokens=100, ignore_eos=True))[0]
    assert len(out.token_ids) == 10 and out.finish_reason == "length"


@pytest.mark.parametrize("kwargs,match", [(dict(max_tokens=0), "max_tokens"), (dict(temperature=-0.1), "temperature"),
                                          (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(top_k=-1), "top_k")])
def test_bad_sampling_params(kwargs, match):
    with pytest.raises(InvalidSamplingParamsError, match=match):
        SamplingParams(**kwargs)


def test_bad_prompts_do_not_affect_others(llm):
    eng = llm.engine
    good = eng.add_request(MIXED[0], SamplingParams(max_tokens=5, ignore_eos=True))
    with pytest.raises(PromptTooLongError, match="context window"):
        eng.add_request(list(range(1, 400)) * 3, SamplingParams())
    with pytest.raises(InvalidPromptError, match="outside the vocabulary"):
        eng.add_request([1, 10**6], SamplingParams())
    with pytest.raises(InvalidPromptError, match="empty"):
        eng.add_request([], SamplingParams())
    while eng.has_unfinished():
        eng.step()
    assert good.output_ids == run_alone(llm, MIXED[0], SamplingParams(max_tokens=5, ignore_eos=True))


def test_bad_paths_and_formats(tmp_path, targets):
    import json
    import shutil

    with pytest.raises(ModelNotFoundError, match="does not exist"):
        LLM(model=str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="config.json"):
        LLM(model=str(tmp_path / "empty"))
    other = tmp_path / "llama"
    shutil.copytree(targets["tied_gqa2"], other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(UnsupportedArchitectureError, match="Qwen3ForCausalLM"):
        LLM(model=str(other))
    extra = tmp_path / "extra"
    shutil.copytree(targets["tied_gqa2"], extra)
    (extra / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": cfg["num_hidden_layers"] - 1}))
    with pytest.raises(CheckpointError, match="unexpected tensors: \\['model.layers.2"):
        LLM(model=str(extra))
    missing = tmp_path / "missing"
    shutil.copytree(targets["tied_gqa2"], missing)
    (missing / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": cfg["num_hidden_layers"] + 1}))
    with pytest.raises(CheckpointError, match="missing tensors: \\['model.layers.3"):
        LLM(model=str(missing))


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_num_seqs=0), "max_num_seqs must be an integer >= 1, got 0 \\(--max-num-seqs"),
    (dict(max_batched_tokens=-4), "--max-num-batched-tokens"),
    (dict(kv_cache_tokens=3), "kv_cache_tokens must be an integer >= 16"),
    (dict(max_model_len=1), "max_model_len must be an integer >= 2"),
    (dict(min_confidence=1.5), "min_confidence must be in \\[0, 1\\]"),
    (dict(kv_cache_memory_fraction=0.0), "kv_cache_memory_fraction must be in"),
])
def test_engine_settings_it_cannot_run_with_are_refused(kwargs, match):
    """(max_num_seqs 0 used to leave generate waiting forever for a batch that could hold nothing.)"""
    from sparkdec.engine.llm_engine import Engine, EngineConfig

    with pytest.raises(SparkdecError, match=match):
        Engine(EngineConfig(**kwargs))


def test_prompt_rows_marked_for_the_prefill_kernel(llm, monkeypatch):
    """SPARKDEC_PREFILL_KERNEL: steps with prompt chunks tell the forward where the prompt rows begin (on CUDA
    they take the prefill kernel); the outputs are unchanged (CPU: the reference attention either way)."""
    from sparkdec.engine import context

    params = SamplingParams(max_tokens=12, ignore_eos=True)

    def staggered():  # the second request arrives while the first decodes: a step mixes both kinds of rows
        return run_staggered(llm.engine, (MIXED[2], params), (MIXED[7], params), steps=3)

    ref = staggered()
    seen = []
    build = context.build_context

    def spy(rows, page_size, device, prompt_from=None):
        ctx = build(rows, page_size, device, prompt_from)
        seen.append(ctx.prompt_row)
        return ctx

    monkeypatch.setattr(context, "PREFILL_KERNEL", True)
    monkeypatch.setattr("sparkdec.engine.runner.build_context", spy)
    assert staggered() == ref
    assert 0 in seen and None in seen and any(r is not None and r > 0 for r in seen), seen


def test_bad_environment_switches_name_the_variable(monkeypatch, tmp_path, targets):
    """SPARKDEC_* switches: a value they do not take is an error naming the variable and the values it takes;
    a GEMM tile table the user named must exist and parse."""
    from sparkdec import env, sampling

    monkeypatch.setenv("SPARKDEC_PDL", "7")
    with pytest.raises(env.InvalidSettingError, match="SPARKDEC_PDL='7'.*0, 1, 2"):
        env.choice("SPARKDEC_PDL", 1, (0, 1, 2))
    monkeypatch.delenv("SPARKDEC_PDL")
    monkeypatch.setenv("SPARKDEC_PREFILL_KERNEL", "yes")
    with pytest.raises(env.InvalidSettingError, match="SPARKDEC_PREFILL_KERNEL='yes'"):
        env.flag("SPARKDEC_PREFILL_KERNEL", True)
    monkeypatch.setenv("SPARKDEC_PREFILL_KERNEL", "")
    assert env.flag("SPARKDEC_PREFILL_KERNEL", True) is True  # unset or empty: the default
    monkeypatch.setattr(sampling, "FUSED_SAMPLER", None)
    monkeypatch.setenv("SPARKDEC_FUSED_SAMPLER", "on")
    with pytest.raises(env.InvalidSettingError, match="SPARKDEC_FUSED_SAMPLER"):
        LLM(model=str(targets["tied_gqa2"]), device="cpu")  # at start, not at the first sampled token
    pytest.importorskip("triton")
    from sparkdec.ops import triton_gemm

    with pytest.raises(env.InvalidSettingError, match="does not exist"):
        triton_gemm.load_configs(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(env.InvalidSettingError, match="not valid JSON"):
        triton_gemm.load_configs(tmp_path / "bad.json")
    monkeypatch.setenv("SPARKDEC_GLUON_CONFIGS", str(tmp_path / "missing.json"))
    with pytest.raises(env.InvalidSettingError, match="SPARKDEC_GLUON_CONFIGS"):
        triton_gemm.gluon_gemv.load_configs()
