"""The speculation bypass (spec/bypass.py): sequences whose drafts are not expected to pay decode plainly, with the
same tokens, and are probed again after a doubling backoff; where drafts pay nothing changes."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from sparkdec import LLM, Guided, SamplingParams
from sparkdec.engine.llm_engine import DEFAULT_PAIR
from sparkdec.engine.sequence import SpecStats
from sparkdec.spec import bypass

pytestmark = pytest.mark.skipif(not (DEFAULT_PAIR / "draft" / "config.json").is_file(), reason="no shipped pair")

PROMPTS = ["The standard library provides", "def parse(line):\n", "This module defines functions for",
           "class Stack:\n"]


class FixedCosts:
    """Costs given as functions (no timing): the choices follow them exactly."""

    def __init__(self, forward, propose):
        self.forward_ms, self.propose_ms = forward, propose

    def ready(self, tokens: int, seqs: int) -> bool:
        return True


def _params() -> list[SamplingParams]:
    return [SamplingParams(max_tokens=120, ignore_eos=True),
            SamplingParams(max_tokens=120, ignore_eos=True, temperature=0.9, seed=3),
            SamplingParams(max_tokens=120, ignore_eos=True, repetition_penalty=1.2),
            SamplingParams(max_tokens=60, guided=Guided(regex=r"[a-z_]{1,40}\(\d{1,3}\)"))]


@pytest.fixture(scope="module")
def plain():
    return LLM(draft=None, speculative=False)


def test_drafts_that_do_not_pay_are_set_aside_with_the_same_tokens(plain):
    """A propose costing ten forwards: no acceptance pays for it, so after its first round each sequence decodes
    plainly and is probed after 16, 32, 64 ... tokens; greedy, sampled, penalized and guided requests keep plain
    decoding's tokens, and the tokens decoded plainly are counted."""
    llm = LLM(spec_bypass=True)
    llm.engine.bypass.costs = FixedCosts(lambda n: 10.0, lambda k: 100.0)
    params = _params()
    outs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outs] == [o.token_ids for o in plain.generate(PROMPTS, params)]
    for o, p in zip(outs, params):
        plain_tokens = o.stats["bypassed_tokens"]
        if p.guided is None:  # (120 tokens; the guided one's regex ends it within a few)
            assert 2 <= o.stats["rounds"] <= 5 and plain_tokens > len(o.token_ids) - 5 * 8, o.stats
        # every token but the prompt's first: from a round (a probe's round may end past max_tokens) or counted plain
        assert 0 <= plain_tokens + o.stats["num_accepted_tokens"] + o.stats["rounds"] - (len(o.token_ids) - 1) <= 7
    alone = llm.generate(PROMPTS[:1], params[0])[0]  # (one greedy request: chained rounds and plain steps ahead)
    # its first round, then probes after 16, 32 and 64 plain tokens (the last near the end): 7 without the doubling
    assert alone.token_ids == outs[0].token_ids and alone.stats["rounds"] in (3, 4), alone.stats


def test_drafts_that_pay_keep_every_round(plain):
    """A free propose and a flat forward: speculation always pays, and the rounds are those of an engine without
    the bypass."""
    llm, off = LLM(spec_bypass=True), LLM(spec_bypass=False)
    llm.engine.bypass.costs = FixedCosts(lambda n: 10.0, lambda k: 0.0)
    params = _params()
    got = llm.generate(PROMPTS, params, trace=True)
    want = off.generate(PROMPTS, params, trace=True)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [[r["draft_token_ids"] for r in o.rounds] for o in got] == [[r["draft_token_ids"] for r in o.rounds]
                                                                        for o in want]
    assert all(o.stats["bypassed_tokens"] == 0 for o in got)


def _seq(tokens_per_round: float, drafts: int = 7):
    st = bypass.BypassState(tokens_per_round=tokens_per_round)
    return SimpleNamespace(spec=SpecStats(block_size=7), output_ids=[1] * 10, bypass=st, drafts=drafts)


def test_the_sequences_whose_drafts_pay_most_speculate():
    """Under a forward whose cost grows with its rows, the sequences expected to accept most speculate and the
    rest decode plainly; a sequence set aside is probed once its backoff has passed, and a probe that loses doubles
    the backoff, one that pays resets it."""
    costs = FixedCosts(lambda n: 10.0 + 0.5 * n, lambda k: 3.0 + 0.2 * k)
    chooser = bypass.Bypass(costs)
    seqs = [_seq(a) for a in (1.1, 6.0, 1.3, 4.5)]
    ell = lambda s: s.drafts  # noqa: E731
    chosen = chooser.choose(seqs, seqs, ell)
    assert chosen == {id(seqs[1]), id(seqs[3])}
    assert [s.bypass.aside_until for s in seqs] == [26, None, 26, None]
    seqs[0].output_ids += [2] * 16  # its backoff passed: probed, whatever its average
    assert id(seqs[0]) in chooser.choose(seqs, seqs, ell) and seqs[0].bypass.aside_until == 26
    seqs[0].spec.record(7, 0)  # the probe's round: nothing accepted
    chooser.choose(seqs, seqs, ell)
    assert seqs[0].bypass.aside_until == 26 + 32 and seqs[0].bypass.backoff == 32
    assert seqs[0].spec.bypassed_tokens == 16 and seqs[2].spec.bypassed_tokens == 0
    seqs[0].output_ids += [2] * 32
    assert id(seqs[0]) in chooser.choose(seqs, seqs, ell)  # probed again
    seqs[0].spec.record(7, 7)  # the probe accepts the whole block: its average 0.7 * 1.07 + 0.3 * 8 = 3.15 pays
    assert id(seqs[0]) in chooser.choose(seqs, seqs, ell) and seqs[0].bypass.tokens_per_round == pytest.approx(3.149)
    assert seqs[0].bypass.aside_until is None and seqs[0].bypass.backoff == bypass.FIRST_BACKOFF
    everyone = chooser.choose([_seq(1.2)], [], ell)  # (no sequence may speculate: nothing to choose)
    assert everyone == set()


def test_costs_are_timed_where_first_needed(plain):
    """The engine's own costs (spec/step_costs.py on trash rows) are timed at powers of two up to the counts a choice
    needs, with no work queued ahead; the tokens are plain decoding's."""
    llm = LLM(spec_bypass=True)
    params = SamplingParams(max_tokens=40, ignore_eos=True, temperature=1.2, seed=2)
    outs = llm.generate(PROMPTS[:2], params)
    assert [o.token_ids for o in outs] == [o.token_ids for o in plain.generate(PROMPTS[:2], params)]
    costs = llm.engine.bypass.costs
    assert set(costs.forward_points) == {1, 2, 4, 8, 16} and set(costs.propose_points) == {1, 2}
    assert all(ms > 0 for ms in list(costs.forward_points.values()) + list(costs.propose_points.values()))
    assert bypass._points(9, (1, 3, 12, 64)) == [1, 2, 3, 4, 8, 12, 16]
