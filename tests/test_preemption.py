"""KV pages on demand: a cache too small for every request's whole life preempts the newest requests, which later
recompute their context and go on; every output equals the one a large cache gives."""
from __future__ import annotations

import pytest

from sparkdec import LLM, SamplingParams
from sparkdec.engine.llm_engine import DEFAULT_PAIR

pytestmark = pytest.mark.skipif(not (DEFAULT_PAIR / "draft" / "config.json").is_file(), reason="no shipped pair")

PROMPTS = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n    def __init__(self, path):\n",
           "The standard library provides", "for key, value in items:\n", "This module defines functions for"]
SMALL = dict(kv_cache_tokens=12 * 16, page_size=16)  # 12 pages: about two requests' whole lives


def _run(small: bool, speculative: bool, params: SamplingParams):
    llm = LLM(speculative=speculative, **(SMALL if small else {}))
    outs = llm.generate(PROMPTS, params)
    return outs, llm.engine.scheduler.num_preemptions


@pytest.mark.parametrize("speculative", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_preempted_requests_finish_with_the_same_tokens(speculative, temperature):
    params = SamplingParams(max_tokens=64, ignore_eos=True, temperature=temperature, seed=21, logprobs=1,
                            prompt_logprobs=1)
    ref, none = _run(False, speculative, params)
    got, preempted = _run(True, speculative, params)
    assert none == 0 and preempted > 0
    for a, b in zip(ref, got):
        assert b.token_ids == a.token_ids and b.text == a.text and b.finish_reason == "length"
        assert b.logprobs == a.logprobs and b.prompt_logprobs == a.prompt_logprobs


def test_requests_admitted_beyond_their_whole_lives():
    """More requests run at once than whole-life reservations would admit: 6 lives of 6 pages in 12 pages."""
    llm = LLM(**SMALL)
    for p in PROMPTS:
        llm.engine.add_request(p, SamplingParams(max_tokens=64, ignore_eos=True))
    llm.engine.step()
    assert len(llm.engine.scheduler.running) >= 4
    while llm.engine.has_unfinished():
        llm.engine.step()
    assert llm.engine.blocks.num_free == llm.engine.blocks.num_pages


def test_requests_preempted_mid_prompt_score_their_prompt_once(monkeypatch):
    """Long prompts in small chunks: some requests lose their pages before their prompt is done (and some after);
    their prompt log-probabilities are still each prompt token's, once."""
    from sparkdec.engine.scheduler import Scheduler

    victims = []
    preempt = Scheduler._preempt
    monkeypatch.setattr(Scheduler, "_preempt", lambda self, seq: victims.append(seq.prefill_done) or preempt(self, seq))
    prompts = [p * 10 for p in PROMPTS]
    params = SamplingParams(max_tokens=30, ignore_eos=True, logprobs=0, prompt_logprobs=2)
    kw = dict(max_num_seqs=4, max_batched_tokens=32)
    ref = LLM(**kw).generate(prompts, params)
    assert not victims
    got = LLM(kv_cache_tokens=20 * 16, **kw).generate(prompts, params)
    assert False in victims and True in victims  # preempted while prefilling, and while decoding
    for a, b in zip(ref, got):
        assert len(b.prompt_logprobs) == len(b.prompt_token_ids)
        assert (b.token_ids, b.logprobs, b.prompt_logprobs) == (a.token_ids, a.logprobs, a.prompt_logprobs)


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_plain_decoding_one_step_ahead_survives_preemption(prefix_caching):
    """Plain greedy decoding queues each step before reading the last (engine/lookahead.py): preemption waits for that
    step, and a queued token of a sequence preempted since is thrown away; one request stops on a token meanwhile."""
    import random

    rng = random.Random(0)
    prompts = [[rng.randrange(100, 1000) for _ in range(20)] for _ in range(4)]
    free = SamplingParams(max_tokens=64, ignore_eos=True)
    stop = LLM(speculative=False).generate([prompts[1]], free)[0].token_ids[13]
    params = [free, SamplingParams(max_tokens=64, ignore_eos=True, stop_token_ids=(stop,)), free, free]
    ref = LLM(speculative=False).generate(prompts, params)
    llm = LLM(speculative=False, kv_cache_tokens=9 * 16, prefix_caching=prefix_caching)
    got = llm.generate(prompts, params)
    assert llm.engine.scheduler.num_preemptions > 0 and llm.engine.lookahead is not None
    assert [o.token_ids for o in got] == [o.token_ids for o in ref] and got[1].finish_reason == "stop"
    assert llm.engine.blocks.num_free == llm.engine.blocks.num_pages
