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
    """A propose costing ten forwards: no acceptance pays for it, so after its first probe each sequence decodes
    plainly and is probed again after 16, 32, 64 ... tokens; greedy, sampled, penalized and guided requests keep plain
    decoding's tokens, and the tokens decoded plainly are counted."""
    llm = LLM(spec_bypass=True)
    llm.engine.bypass = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 100.0), calibrate=False)
    params = _params()
    outs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outs] == [o.token_ids for o in plain.generate(PROMPTS, params)]
    for o, p in zip(outs, params):
        plain_tokens = o.stats["bypassed_tokens"]
        if p.guided is None:  # (120 tokens; the guided one's regex ends it within a few)
            assert 2 <= o.stats["rounds"] <= 4 * bypass.PROBE_ROUNDS and plain_tokens >= 60, o.stats
        # every token but the prompt's first: from a round (a probe's round may end past max_tokens) or counted plain
        assert 0 <= plain_tokens + o.stats["num_accepted_tokens"] + o.stats["rounds"] - (len(o.token_ids) - 1) <= 7
    long = SamplingParams(max_tokens=200, ignore_eos=True)
    alone = llm.generate(PROMPTS[:1], long)[0]  # (one greedy request: chained rounds and plain steps ahead)
    # its first probe, then probes after 32 and 64 plain tokens (then 128: past the end); about 20 rounds without the
    # doubling
    assert alone.token_ids == plain.generate(PROMPTS[:1], long)[0].token_ids
    assert 2 * bypass.PROBE_ROUNDS < alone.stats["rounds"] <= 3 * bypass.PROBE_ROUNDS + 1, alone.stats


def test_drafts_that_pay_keep_every_round(plain):
    """A free propose and a flat forward: speculation always pays, and the rounds are those of an engine without
    the bypass."""
    llm, off = LLM(spec_bypass=True), LLM(spec_bypass=False)
    llm.engine.bypass = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 0.0), calibrate=False)
    params = _params()
    got = llm.generate(PROMPTS, params, trace=True)
    want = off.generate(PROMPTS, params, trace=True)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert [[r["draft_token_ids"] for r in o.rounds] for o in got] == [[r["draft_token_ids"] for r in o.rounds]
                                                                        for o in want]
    assert all(o.stats["bypassed_tokens"] == 0 for o in got)


def _seq(tokens_per_round: float, drafts: int = 7, greedy: bool = True):
    st = bypass.BypassState(window=[tokens_per_round] * bypass.PROBE_ROUNDS, seen=(0, 0, 10))
    return SimpleNamespace(spec=SpecStats(block_size=7), output_ids=[1] * 10, bypass=st, drafts=drafts,
                           params=SimpleNamespace(greedy=greedy))


def test_the_sequences_whose_drafts_pay_most_speculate():
    """Under a forward whose cost grows with its rows, the sequences expected to accept most speculate and the
    rest decode plainly; a sequence set aside is probed for PROBE_ROUNDS rounds once its backoff has passed, and a
    probe that loses doubles the backoff, one that pays resets it."""
    costs = FixedCosts(lambda n: 10.0 + 1.5 * n, lambda k: 3.0 + 0.2 * k)
    chooser = bypass.Bypass(costs, calibrate=False)
    seqs = [_seq(a) for a in (1.1, 6.0, 1.3, 4.5)]
    ell = lambda s: s.drafts  # noqa: E731
    assert chooser.choose(seqs, seqs, ell) == {id(seqs[1]), id(seqs[3])}
    assert [s.bypass.aside_until for s in seqs] == [42, None, 42, None]
    seqs[0].output_ids += [2] * 32  # its backoff passed: probed, whatever its average
    for _ in range(bypass.PROBE_ROUNDS):
        assert id(seqs[0]) in chooser.choose(seqs, seqs, ell)
        seqs[0].spec.record(7, 0)  # the probe's rounds: nothing accepted
    chooser.choose(seqs, seqs, ell)
    assert seqs[0].bypass.tokens_per_round == 1.0
    assert seqs[0].bypass.aside_until == 42 + 64 and seqs[0].bypass.backoff == 64
    assert seqs[0].spec.bypassed_tokens == 32 and seqs[2].spec.bypassed_tokens == 0
    seqs[0].output_ids += [2] * 64
    for _ in range(bypass.PROBE_ROUNDS):
        assert id(seqs[0]) in chooser.choose(seqs, seqs, ell)
        seqs[0].spec.record(7, 7)  # this probe accepts whole blocks
    assert id(seqs[0]) in chooser.choose(seqs, seqs, ell) and seqs[0].bypass.tokens_per_round == 8.0
    assert seqs[0].bypass.aside_until is None and seqs[0].bypass.backoff == bypass.FIRST_BACKOFF
    assert chooser.choose([_seq(1.2)], [], ell) == set()  # (no sequence may speculate: nothing to choose)


def test_real_steps_scale_the_costs():
    """The ratio of each kind of step's wall clock to its timed costs scales them: once plain steps are found slower
    than their forward's timing (host work) and rounds about as fast, speculation that the costs alone set aside
    is chosen."""
    chooser = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 10.0))  # (a round costs two plain steps)

    def choose(tokens_per_round: float) -> bool:
        seq = _seq(tokens_per_round)
        return bool(chooser.choose([seq], [seq], lambda s: 7))
    for ms in (14.0, 16.0, 15.0):  # (the plain steps that time them: EXPLORE_TIMED)
        assert not choose(1.5) and chooser.predicted == ((False, False), 10.0)  # 1 token in 10 ms beats 1.5 in 20
        chooser.timed(ms)  # a plain step takes 15 ms where its forward took 10
    assert chooser.ratio[False, False] == pytest.approx(1.5) and chooser.ratio[True, False] is None  # (their mean)
    assert not choose(1.5)  # (rounds scaled as plain steps until one is timed)
    assert choose(4.0) and chooser.predicted == ((True, False), 20.0)
    chooser.timed(22.0)
    assert chooser.ratio[True, False] == pytest.approx(1.1)
    assert choose(1.5)  # 1.5 tokens in 22 ms beats 1 in 15


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


def test_rejection_sampled_requests_always_speculate():
    """Rejection-sampled rows give other tokens than plain sampling (the same distribution), so a seeded request of
    the rejection mode speculates every round whatever the costs: its tokens do not depend on timings; its greedy
    neighbour speculates too (the propose is paid for anyway, and the forward costs nothing more)."""
    params = [SamplingParams(max_tokens=60, ignore_eos=True, temperature=0.9, seed=3),
              SamplingParams(max_tokens=60, ignore_eos=True)]
    off = LLM(accept_mode="rejection", spec_bypass=False).generate(PROMPTS[:2], params, trace=True)
    llm = LLM(accept_mode="rejection", spec_bypass=True)
    llm.engine.bypass = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 100.0), calibrate=False)
    on = llm.generate(PROMPTS[:2], params, trace=True)
    assert on[0].token_ids == off[0].token_ids and len(on[0].rounds) == len(off[0].rounds)
    assert on[1].token_ids == off[1].token_ids and [o.stats["bypassed_tokens"] for o in on] == [0, 0]


def test_one_step_says_little_of_the_ratio():
    """A step that only queued work (0 ms) or waited on something else moves the ratio of real to timed costs by at
    most RATIO_RANGE."""
    chooser = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 10.0))
    seq = _seq(1.5)
    chooser.choose([seq], [seq], lambda s: 7)
    chooser.timed(0.0)
    assert chooser.ratio[False, False] == bypass.RATIO_RANGE[0] and chooser.predicted is None


def test_plain_steps_are_timed_before_they_are_judged():
    """Until EXPLORE_TIMED plain steps of a batch's sampling have been timed, a batch past its probes decodes plainly
    (no backoff; at most EXPLORE_STEPS such steps, a step with prompt chunks, never timed, not one of them): a plain step
    one step ahead can take far less than its forward's timing, which the rounds' ratio does not tell. Found fast,
    plain steps win where the rounds' ratio alone would keep speculating; found slow, speculation goes on. Greedy and
    sampled steps are timed apart (a sampled step's sampler costs what a greedy one's argmax does not), and a kind not
    timed borrows its sampling twin's ratio."""
    def explore(chooser, seq, plain_ms: float) -> None:
        for _ in range(bypass.EXPLORE_TIMED):
            assert chooser.choose([seq], [seq], lambda s: 7) == set()
            assert chooser.predicted == ((False, not seq.params.greedy), 10.0)
            chooser.timed(plain_ms)
        assert seq.bypass.aside_until is None

    def run(plain_ms: float) -> set:
        chooser = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 10.0))
        seq = _seq(3.0)  # 3 tokens in a 20 ms round against 1 in a 10 ms plain step
        chooser.ratio[True, False] = 1.0  # (rounds took what their costs said)
        assert chooser.choose([seq], [seq], lambda s: 7, timeable=False) != set()  # (prompt chunks: not explored)
        explore(chooser, seq, plain_ms)
        return chooser.choose([seq], [seq], lambda s: 7)
    assert run(5.0) == set()  # 1 token in 5 ms beats 3 in 20 by more than MARGIN
    assert run(12.0) != set()
    chooser = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 10.0))
    chooser.ratio[True, False] = chooser.ratio[True, True] = 1.0
    explore(chooser, _seq(3.0), 5.0)  # greedy plain steps are fast ...
    sampled = _seq(3.0, greedy=False)
    explore(chooser, sampled, 12.0)  # ... sampled ones are not
    assert chooser.ratio[False, False] == 0.5 and chooser.ratio[False, True] == pytest.approx(1.2)
    assert chooser.choose([sampled], [sampled], lambda s: 7) == {id(sampled)}
    greedy = _seq(3.0)
    assert chooser.choose([greedy], [greedy], lambda s: 7) == set()
    chooser.ratio[False, True] = None
    assert chooser._ratio(False, True) == 0.5 and chooser._ratio(True, True) == 1.0  # (its twin's; its own)
    never, seq = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 10.0)), _seq(3.0)  # (steps never timed:
    # EXPLORE_STEPS of them, no more)
    assert [never.choose([seq], [seq], lambda s: 7) for _ in range(bypass.EXPLORE_STEPS + 1)].count(set()) \
        == bypass.EXPLORE_STEPS
    probing = _seq(3.0)
    probing.bypass.window = []  # (a sequence still probing speculates: no plain step to time)
    fresh = bypass.Bypass(FixedCosts(lambda n: 10.0, lambda k: 10.0))
    assert fresh.choose([probing], [probing], lambda s: 7) == {id(probing)} and fresh.explored == {False: 0, True: 0}


def test_the_engine_times_plain_steps_of_each_sampling(plain):
    """In the engine, a greedy and a sampled batch past their probes each decode plainly until EXPLORE_TIMED plain steps
    of their sampling have been timed (the step ahead's first, only queued, is not), with plain decoding's tokens."""
    llm = LLM(spec_bypass=True)
    for params in (SamplingParams(max_tokens=60, ignore_eos=True),
                   SamplingParams(max_tokens=60, ignore_eos=True, temperature=0.9, seed=4)):
        outs = llm.generate(PROMPTS[:2], params)
        assert [o.token_ids for o in outs] == [o.token_ids for o in plain.generate(PROMPTS[:2], params)]
        sampled = not params.greedy
        assert llm.engine.bypass.steps[False, sampled] >= bypass.EXPLORE_TIMED, llm.engine.bypass.steps
        assert 1 <= llm.engine.bypass.explored[sampled] <= bypass.EXPLORE_STEPS
        assert llm.engine.bypass.ratio[False, sampled] is not None
