"""The prefix cache: prompt pages kept after their request and reused by later prompts that begin with them, with
the tokens (and log-probabilities) a cold cache gives."""
from __future__ import annotations

import pytest

from sparkdec import LLM, SamplingParams
from sparkdec.engine.kv_cache import BlockManager
from sparkdec.engine.llm_engine import DEFAULT_PAIR

SHIPPED = (DEFAULT_PAIR / "draft" / "config.json").is_file()
SYSTEM = "You are a careful Python programmer. Answer with code only, no prose, and keep names short.\n" * 3
QUESTIONS = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n", "def parse(line):\n"]


def test_pages_are_cached_shared_and_evicted_least_recently_used():
    bm = BlockManager(4, 2)
    a, b, c = [], [], []
    bm.reserve(a, 4)  # 2 pages
    bm.register(a[0], b"k0")
    bm.register(a[1], b"k1")
    bm.release(a)  # cached, held by no table: still free to reserve; the last page first in line to go
    assert bm.num_free == 4 and bm.cached_pages([b"k0", b"k1", b"k2"]) == [0, 1]
    bm.share(b, bm.cached_pages([b"k0"]))
    assert b == [0] and bm.refs[0] == 1 and bm.num_free == 3
    bm.reserve(c, 6)  # 3 pages: the 2 empty ones, then the idle cached page 1, which forgets its key
    assert sorted(c) == [1, 2, 3] and bm.cached_pages([b"k0", b"k1"]) == [0] and bm.num_free == 0
    bm.release(b)
    bm.release(c)
    assert bm.num_free == 4 and bm.cached_pages([b"k0"]) == [0] and bm.refs == [0, 0, 0, 0]


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
@pytest.mark.parametrize("speculative,temperature", [(True, 0.0), (False, 0.0), (True, 0.8)])
def test_shared_prefixes_give_the_cold_cache_tokens(speculative, temperature):
    params = SamplingParams(max_tokens=24, ignore_eos=True, temperature=temperature, seed=5, logprobs=1)
    prompts = [SYSTEM + q for q in QUESTIONS]
    cold = LLM(speculative=speculative, prefix_caching=False)
    warm = LLM(speculative=speculative)
    for p in prompts:  # one at a time: each later prompt finds the system prompt's pages cached
        a, b = cold.generate([p], params)[0], warm.generate([p], params)[0]
        assert (a.token_ids, a.logprobs) == (b.token_ids, b.logprobs)
        # the drafter's context rows come from the cached pages too: the same drafts, so the same rounds
        assert (a.stats["rounds"], a.stats["num_accepted_tokens"]) == (b.stats["rounds"], b.stats["num_accepted_tokens"])
    sched = warm.engine.scheduler
    n = len(warm.tokenizer.encode(prompts[0]))
    assert sched.prefix_hits >= 3 * (n // 16 - 1) * 16 and sched.prefix_queries > sched.prefix_hits
    assert cold.engine.scheduler.prefix_hits == 0
    # a batch that shares the prefix among itself and with the cache
    batch_cold, batch_warm = cold.generate(prompts, params), warm.generate(prompts, params)
    assert [o.token_ids for o in batch_cold] == [o.token_ids for o in batch_warm]


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
def test_prompt_logprobs_skip_the_cache_and_small_caches_evict():
    warm = LLM(kv_cache_tokens=24 * 16)
    params = SamplingParams(max_tokens=8, ignore_eos=True, prompt_logprobs=1)
    first = warm.generate([SYSTEM + QUESTIONS[0]], params)[0]
    again = warm.generate([SYSTEM + QUESTIONS[0]], params)[0]
    assert again.prompt_logprobs == first.prompt_logprobs and warm.engine.scheduler.prefix_hits == 0
    # many different prompts through a small cache: idle cached pages are taken back; outputs stay right
    cold = LLM(kv_cache_tokens=24 * 16, prefix_caching=False)
    prompts = [f"{i} " * 40 + q for i in range(6) for q in QUESTIONS[:2]]
    greedy = SamplingParams(max_tokens=16, ignore_eos=True)
    for p in prompts + prompts[:3]:
        assert warm.generate([p], greedy)[0].token_ids == cold.generate([p], greedy)[0].token_ids
    assert warm.engine.scheduler.prefix_hits > 0
    assert warm.engine.blocks.num_free == warm.engine.blocks.num_pages


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
def test_preempted_requests_reuse_their_cached_prompt():
    prompts = [SYSTEM + q for q in QUESTIONS]
    params = SamplingParams(max_tokens=48, ignore_eos=True)
    ref = LLM(prefix_caching=False).generate(prompts, params)
    small = LLM(kv_cache_tokens=30 * 16)
    got = small.generate(prompts, params)
    assert small.engine.scheduler.num_preemptions > 0 and small.engine.scheduler.prefix_hits > 0
    assert [o.token_ids for o in got] == [o.token_ids for o in ref]
