"""The batch verify-length policy (Algorithm 1, spec §11.4): its choices by hand, its cost table, and that a batch
under it still gives exactly the plain output."""
from __future__ import annotations

import pytest

from helpers import make_bigram_draft, make_draft
from sparkdec import LLM, SamplingParams
from sparkdec.errors import SparkdecError
from sparkdec.spec.schedule import StepCosts, batch_verify_lengths, survivals
from sparkdec.spec.step_costs import profile_points

PROMPTS = [[1, 5, 9, 33, 2, 7, 100, 4], [3, 4, 5], [7] * 20, [11, 12, 13, 14]]


def test_survivals_are_running_products():
    assert survivals([0.5, 0.5, 1.0]) == [0.5, 0.25, 0.25]
    assert survivals([]) == []


def test_algorithm_1_by_hand():
    costs = StepCosts({2: 1.0, 4: 1.1, 8: 1.2, 16: 3.0}, tiers=(2, 4, 8, 16))
    a, b = survivals([0.9] * 5), survivals([0.3] * 5)
    # B = 2 costs 1.0: 2 tokens per ms. Sequence 0's five drafts (a = .9 .. .59) and sequence 1's first (.3) each
    # raise (tokens) / cost up to B = 8; the next candidate (.09) would move B to 9 (tier 16, 3.0 ms): stop there
    assert batch_verify_lengths([a, b], [5, 5], costs.rate) == [5, 1]
    # a flat cost admits everything, up to what each sequence may still emit
    assert batch_verify_lengths([a, b], [5, 2], lambda n: 1.0) == [5, 2]
    # a cost that doubles with every token admits nothing
    assert batch_verify_lengths([a, b], [5, 5], lambda n: 2.0 ** -n) == [0, 0]


def test_algorithm_1_stops_at_the_first_candidate_that_does_not_pay():
    # B = 2 costs 1.0 ms, B = 3..4 (the next graph tier) 1.5 ms. The first candidate alone does not pay
    # (2.9 / 1.5 < 2 / 1.0); the first two together would (3.78 / 1.5). The early stop admits neither: a search
    # that went on would make verifying d_1 of one sequence depend on the other's later candidates (spec §11.5)
    costs = StepCosts({2: 1.0, 4: 1.5}, tiers=(2, 4))
    assert batch_verify_lengths([[0.9, 0.85], [0.88]], [2, 1], costs.rate) == [0, 0]
    assert batch_verify_lengths([[0.9, 0.85], [0.88]], [1, 1], StepCosts({2: 1.0, 4: 1.3}, tiers=(2, 4)).rate) == [1, 1]


def test_ties_go_to_the_earlier_draft_so_lengths_stay_prefixes():
    surv = [[0.5, 0.5, 0.5], [0.5, 0.5]]
    for limit in range(6):  # a rate that pays for exactly `limit` more tokens
        ells = batch_verify_lengths(surv, [3, 2], lambda n: 1.0 if n <= 2 + limit else 1e-9)
        assert sum(ells) == limit and abs(ells[0] - ells[1]) <= 1, ells


def test_step_costs_are_non_decreasing_staircase_then_linear():
    c = StepCosts({1: 1.0, 2: 0.9, 4: 1.1, 8: 1.2, 9: 2.0, 16: 3.0, 32: 6.0}, tiers=(1, 2, 4, 8))
    assert [c.cost_ms(n) for n in (1, 2, 3, 8)] == [1.0, 1.0, 1.1, 1.2]  # forced monotone; tier staircase
    assert c.cost_ms(12) == pytest.approx(2.0 + 3 / 7) and c.cost_ms(40) == pytest.approx(7.5)  # eager: linear
    # never between a graph time and an eager one: with no eager count below, the next eager count's time
    assert StepCosts({64: 1.0, 128: 1.1, 256: 4.0}, tiers=(64, 128)).cost_ms(129) == 4.0
    assert profile_points(24, (1, 2, 4, 8, 16, 32)) == [1, 2, 4, 8, 16, 24]
    assert profile_points(300, (1, 2, 4, 8, 16, 32, 64, 128)) == [1, 2, 4, 8, 16, 32, 64, 128, 129, 256, 300]
    with pytest.raises(ValueError):
        StepCosts({})


def test_profile_rows_stay_inside_the_context_window(targets, tmp_path):
    from sparkdec.spec.step_costs import dummy_pieces

    assert [len(p[1]) for p in dummy_pieces(40, 16, 16, 9)] == [16, 16, 8]
    assert all(max(p[2]) < 16 and set(p[0]) == {9} for p in dummy_pieces(40, 16, 16, 9))
    # an engine whose batch holds more verify rows (8 x 5) than its context window (12 + 5) still profiles
    target = targets["untied_mha"]
    llm = LLM(model=str(target), draft=str(make_draft(tmp_path / "d", target)), max_model_len=12, max_num_seqs=8,
              verify_policy="batch")
    assert llm.engine.rounds.step_costs.counts[-1] == 40
    out = llm.generate([[1, 2, 3]] * 3, SamplingParams(max_tokens=8, ignore_eos=True))
    assert all(len(o.token_ids) == 8 for o in out)


def test_unknown_verify_policy_is_a_clear_error(targets, tmp_path):
    with pytest.raises(SparkdecError, match="verify policy 'best' unknown"):
        LLM(model=str(targets["untied_mha"]), verify_policy="best")
    target = targets["untied_mha"]
    draft = make_draft(tmp_path / "d", target, confidence=False)
    with pytest.raises(SparkdecError, match="needs a drafter with a confidence head"):
        LLM(model=str(target), draft=str(draft), verify_policy="batch")


def test_other_rows_of_the_forward_count_in_the_cost():
    # 2 speculating sequences among 6 plain decode rows: B starts at 8, and a ninth row moves to the 16-row tier
    costs = StepCosts({8: 1.0, 16: 10.0}, tiers=(8, 16))
    surv = [[0.9, 0.8], [0.9, 0.8]]
    assert batch_verify_lengths(surv, [2, 2], costs.rate) == [2, 2]
    assert batch_verify_lengths(surv, [2, 2], costs.rate, other_rows=6) == [0, 0]


@pytest.fixture(scope="module")
def batch_pair(targets, tmp_path_factory):
    target = targets["untied_gqa4_odd_vocab"]
    plain = LLM(model=str(target))
    greedy = SamplingParams(max_tokens=96, ignore_eos=True)
    ref = plain.generate(PROMPTS, greedy)
    draft = make_bigram_draft(tmp_path_factory.mktemp("bigram") / "d", target,
                              [p + o.token_ids for p, o in zip(PROMPTS, ref)], confidence=True)
    return plain, LLM(model=str(target), draft=str(draft), verify_policy="batch"), ref


def test_batch_policy_profiles_at_start_and_keeps_greedy_and_sampled_parity(batch_pair):
    plain, spec, ref = batch_pair
    costs = spec.engine.rounds.step_costs
    assert costs is not None and costs.ms == sorted(costs.ms) and costs.counts[0] == 1
    # a steep table, so that the policy trims: each verify token costs 5% more
    spec.engine.rounds.step_costs = StepCosts({n: 1.0 + 0.05 * n for n in (1, 2, 4, 8, 16, 32, 64)})
    outs = spec.generate(PROMPTS, SamplingParams(max_tokens=96, ignore_eos=True), trace=True)
    assert [o.token_ids for o in outs] == [o.token_ids for o in ref]
    verified = [r["num_verified"] for o in outs for r in o.rounds]
    gamma = spec.engine.block_size
    assert any(0 < v < gamma for v in verified) and any(v == 0 for v in verified), verified  # it did choose
    assert sum(o.stats["num_accepted_tokens"] for o in outs) >= 40  # and the drafts still pay
    sampled = [SamplingParams(max_tokens=48, ignore_eos=True, temperature=0.8, seed=s) for s in range(4)]
    assert [o.token_ids for o in spec.generate(PROMPTS, sampled)] == [o.token_ids for o in plain.generate(PROMPTS, sampled)]
    # a request's own verify length caps its share
    mixed = [SamplingParams(max_tokens=48, ignore_eos=True, verify_len=1 if i == 0 else None) for i in range(4)]
    outs = spec.generate(PROMPTS, mixed, trace=True)
    assert [o.token_ids for o in outs] == [o.token_ids[:48] for o in ref]
    assert all(r["num_verified"] <= 1 for r in outs[0].rounds)


def test_cli_passes_the_verify_policy_to_the_engine():
    from sparkdec.cli import build_parser, engine_kwargs

    args = build_parser().parse_args(["generate", "hi", "--verify-policy", "batch"])
    assert engine_kwargs(args)["verify_policy"] == "batch"
    assert engine_kwargs(build_parser().parse_args(["generate", "hi"]))["verify_policy"] == "full"
