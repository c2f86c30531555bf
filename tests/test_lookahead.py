"""Plain greedy decoding one step ahead (engine/lookahead.py) emits exactly what the ordinary round emits: limits, stop
ids, EOS, stop strings, sequences joining, leaving and aborted mid-run, sampled sequences beside greedy ones."""
from __future__ import annotations

import pytest

from sparkdec import LLM, SamplingParams
from sparkdec.engine.llm_engine import EngineConfig

PROMPTS = [[1, 2, 3], [5] * 30, list(range(10, 60)), [7, 8], list(range(100, 111))]


@pytest.fixture(scope="module")
def pair(targets):
    path = str(targets["untied_gqa4_odd_vocab"])
    return LLM(model=path, device="cpu"), LLM(model=path, device="cpu", lookahead=False)


@pytest.fixture
def launched(pair, monkeypatch):
    """The rows of each step the lookahead engine of `pair` queues, as the test runs."""
    look, rows = pair[0].engine.lookahead, []
    real = look._launch
    monkeypatch.setattr(look, "_launch", lambda seqs, *a: rows.append(len(seqs)) or real(seqs, *a))
    return rows


def outputs(llm, prompts, params):
    return [(o.token_ids, o.finish_reason) for o in llm.generate(prompts, params)]


def test_lookahead_is_on_by_default_and_used(pair, launched):
    """On by default; a request that ends at its limit launches one forward per token after its first (the prefill's):
    no step is queued past the limit and thrown away."""
    ahead, plain = pair
    assert EngineConfig().lookahead and ahead.engine.lookahead is not None and plain.engine.lookahead is None
    out = ahead.generate([PROMPTS[0]], SamplingParams(max_tokens=5, ignore_eos=True))[0]
    assert len(out.token_ids) == 5 and out.finish_reason == "length"
    assert launched == [1] * 4 and ahead.engine.lookahead.pending is None


def test_a_row_at_its_limit_leaves_the_next_step_the_others_keep_it(pair, launched):
    """Three sequences with limits 3, 6 and 6: each step after the first queues only the rows that still have room,
    and the tokens are the ordinary round's."""
    ahead, plain = pair
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in (3, 6, 6)]
    assert outputs(ahead, PROMPTS[:3], params) == outputs(plain, PROMPTS[:3], params)
    # the first row needs two steps after its prompt's pass, the others five
    assert launched == [3, 3, 2, 2, 2] and ahead.engine.lookahead.pending is None


def test_same_tokens_with_limits_stop_ids_and_eos(pair):
    ahead, plain = pair
    free = plain.generate([PROMPTS[2]], SamplingParams(max_tokens=12, ignore_eos=True))[0].token_ids
    stop_id = free[6]  # a token the sequence reaches mid-run
    params = [SamplingParams(max_tokens=3 + 4 * i, ignore_eos=True) for i in range(len(PROMPTS))]
    params[2] = SamplingParams(max_tokens=30, stop_token_ids=[stop_id], ignore_eos=True)
    params[4] = SamplingParams(max_tokens=25)  # EOS ends it if the model emits one
    assert outputs(ahead, PROMPTS, params) == outputs(plain, PROMPTS, params)
    assert outputs(ahead, [PROMPTS[2]], params[2])[0][1] == "stop"


def test_same_tokens_when_sequences_join_leave_and_abort(pair):
    ahead, plain = pair
    results = []
    for llm in pair:
        eng = llm.engine
        first = eng.add_request(PROMPTS[0], SamplingParams(max_tokens=25, ignore_eos=True))
        gone = eng.add_request(PROMPTS[1], SamplingParams(max_tokens=40, ignore_eos=True), request_id="gone")
        late, steps = None, 0
        while eng.has_unfinished():
            eng.step()
            steps += 1
            if steps == 4:
                late = eng.add_request(PROMPTS[3], SamplingParams(max_tokens=10, ignore_eos=True))
            if steps == 9:
                eng.abort("gone")
        results.append((first.output_ids, late.output_ids, gone.finish_reason))
    assert results[0] == results[1]
    assert results[0][2] == "abort"


def test_sampled_sequences_beside_greedy_ones(pair, launched):
    """Sampled rows are drawn on the device one step ahead (grouped by filters) with the ordinary round's race."""
    params = [SamplingParams(max_tokens=15, ignore_eos=True),
              SamplingParams(max_tokens=15, ignore_eos=True, temperature=0.8, seed=3),
              SamplingParams(max_tokens=12, ignore_eos=True, temperature=0.8, seed=4),
              SamplingParams(max_tokens=18, ignore_eos=True, temperature=1.1, top_k=5, top_p=0.9, seed=5)]
    ahead, plain = pair
    ahead.engine.lookahead.pending = None
    assert outputs(ahead, PROMPTS[:4], params) == outputs(plain, PROMPTS[:4], params)
    launched.clear()
    ahead.generate([PROMPTS[2]], params[1])
    assert launched == [1] * 14  # sampled decoding went one step ahead



def test_processed_sequences_go_one_step_ahead_with_the_rounds_tokens(pair, launched):
    """Requests that rewrite their logits (penalties counting the token still on the device, logit_bias, min_tokens,
    min_p; greedy and sampled) beside plain ones decode one step ahead with the ordinary round's tokens; a grammar
    keeps a request on the round."""
    from types import SimpleNamespace

    from sparkdec.spec.processed import on_device

    params = [SamplingParams(max_tokens=15, repetition_penalty=1.5, frequency_penalty=0.7, logit_bias={3: 2.0}),
              SamplingParams(max_tokens=15, ignore_eos=True),
              SamplingParams(max_tokens=12, temperature=0.8, seed=4, presence_penalty=1.2, min_p=0.05,
                             min_tokens=6),
              SamplingParams(max_tokens=18, ignore_eos=True, temperature=1.1, top_k=5, seed=5, frequency_penalty=1.5)]
    ahead, plain = pair
    ahead.engine.lookahead.pending = None
    got = outputs(ahead, PROMPTS[:4], params)
    assert got == outputs(plain, PROMPTS[:4], params)
    free = outputs(plain, PROMPTS[:1], SamplingParams(max_tokens=15))
    assert got[0] != free[0] and len(set(got[3][0])) > 9  # (the penalties changed the tokens)
    launched.clear()
    ahead.generate([PROMPTS[2]], params[0])
    assert launched == [1] * 14  # processed decoding went one step ahead
    assert on_device(SimpleNamespace(params=params[0], guide=None, bad_words=((3,), (4, 5))))  # (matched there)
    masked = SimpleNamespace(params=params[0], guide=SimpleNamespace(free=lambda: False, fault=None), bad_words=(),
                             logprobs=None, check_failures=1.0)
    assert on_device(masked)  # (processed.GUIDED_ON_DEVICE: masked before the round's read)
    from sparkdec.engine.scheduler import Batch

    assert not ahead.engine.lookahead.takes(Batch(decode=[masked]), lambda s: False)  # (a grammar that refused its
    # tokens lately keeps a request on the round: its next mask needs this step's token on the host; test_guided.py)
    assert not on_device(SimpleNamespace(params=params[1], guide=None, bad_words=()))  # (nothing to process)


ROUND_KEYS = ("anchor_position", "draft_token_ids", "num_verified", "num_accepted", "num_committed")


@pytest.fixture(scope="module")
def spec_pair():
    """The shipped tiny pair, speculative, with and without the next propose queued ahead (spec/chain.py)."""
    return LLM(device="cpu"), LLM(device="cpu", lookahead=False)


def traced(llm, prompts, params):
    outs = llm.generate(prompts, params, trace=True)
    return [(o.token_ids, [{k: r[k] for k in ROUND_KEYS} for r in o.rounds]) for o in outs]


def test_propose_queued_ahead_drafts_what_the_ordinary_round_drafts(spec_pair):
    """Every round's drafts, verify lengths and acceptances are the same: the propose queued from the device's
    acceptance ran at the position and anchor the host then committed (a wrong one would change the drafts)."""
    ahead, plain = spec_pair
    prompts = ["def parse(line):\n", "import os\nimport sys\n", "class Config:\n    def __init__(self, path):\n"]
    params = [SamplingParams(max_tokens=60 + 20 * i, ignore_eos=True) for i in range(3)]
    got, want = traced(ahead, prompts, params), traced(plain, prompts, params)
    assert got == want
    assert sum(len(r) for _, r in got) > 20 and any(x["num_accepted"] for _, r in got for x in r)
    assert ahead.engine.rounds.pending is not None  # the last queued propose, thrown away


def test_propose_queued_ahead_under_simulated_acceptance(spec_pair):
    from sparkdec.spec.simulate import SimulatedAcceptance

    runs = []
    for llm in spec_pair:
        llm.engine.rounds.simulate = SimulatedAcceptance(3)
        try:
            runs.append(traced(llm, ["The standard library provides"], SamplingParams(max_tokens=40, ignore_eos=True)))
        finally:
            llm.engine.rounds.simulate = None
    assert runs[0] == runs[1] and all(r["num_accepted"] == 2 for r in runs[0][0][1][:-1])


@pytest.mark.parametrize("device_draws", [True, False])
def test_sampled_rounds_queue_the_propose_ahead_and_keep_every_round(spec_pair, device_draws, monkeypatch):
    """Exact-sampled rounds with round.DEVICE_DRAWS draw their verify rows on the device with the verify; the device
    accepts those drawn tokens and queues the next propose before the readback: the same drafts, acceptances and
    tokens as the ordinary round (which accepts on the host), and the same tokens as plain sampled decoding."""
    from sparkdec.spec import round as spec_round

    monkeypatch.setattr(spec_round, "DEVICE_DRAWS", device_draws)
    if device_draws:  # only argmax drafts chain: a coupled sequence's race is not what the device chain drafts
        from sparkdec.spec import coupling

        monkeypatch.setattr(coupling, "COUPLED", False)
    ahead, plain = spec_pair
    prompts = ["def parse(line):\n", "import os\nimport sys\n"]
    params = [SamplingParams(max_tokens=50, ignore_eos=True, temperature=0.7, seed=11),
              SamplingParams(max_tokens=40, ignore_eos=True, temperature=1.0, top_k=20, top_p=0.9, seed=12)]
    ahead.engine.rounds.pending = None
    got, want = traced(ahead, prompts, params), traced(plain, prompts, params)
    assert got == want
    assert any(x["num_accepted"] for _, r in got for x in r)
    assert (ahead.engine.rounds.pending is not None) == device_draws  # the rounds went one propose ahead
    alone = LLM(device="cpu", speculative=False).generate(prompts, params)
    assert [t for t, _ in got] == [o.token_ids for o in alone]


@pytest.mark.parametrize("device_processing", [True, False])
def test_processed_rounds_queue_the_propose_ahead_when_processed_on_the_device(spec_pair, device_processing,
                                                                                monkeypatch):
    """Penalized and biased requests (greedy, and exact-sampled without coupling) processed on the device with the
    verify (processed.DEVICE_PROCESSING) chain their next propose: the same rounds as the engine that does not go ahead
    and the same tokens as plain decoding; processed after the read, they do not chain."""
    from sparkdec.spec import coupling, processed

    monkeypatch.setattr(processed, "DEVICE_PROCESSING", device_processing)
    monkeypatch.setattr(coupling, "COUPLED", False)
    ahead, plain = spec_pair
    prompts = ["def parse(line):\n", "import os\nimport sys\n"]
    params = [SamplingParams(max_tokens=50, ignore_eos=True, repetition_penalty=1.2, logit_bias={13: 1.0}),
              SamplingParams(max_tokens=40, ignore_eos=True, temperature=0.8, seed=3, presence_penalty=0.5,
                             frequency_penalty=0.2, min_tokens=5)]
    ahead.engine.rounds.pending = None
    got, want = traced(ahead, prompts, params), traced(plain, prompts, params)
    assert got == want
    assert any(x["num_accepted"] for _, r in got for x in r)
    assert (ahead.engine.rounds.pending is not None) == device_processing
    alone = LLM(device="cpu", speculative=False).generate(prompts, params)
    assert [t for t, _ in got] == [o.token_ids for o in alone]


def test_min_tokens_ends_a_step_ahead_where_the_round_ends():
    """EOS pushed up by logit_bias and held back by min_tokens comes exactly after min_tokens tokens, one step ahead
    (each row counting the token still on the device) as in the round."""
    plain, ahead = LLM(draft=None, speculative=False, lookahead=False), LLM(draft=None, speculative=False)
    eos = plain.engine.tokenizer.eos_token_ids[0]
    for m in (3, 6):
        params = SamplingParams(max_tokens=40, min_tokens=m, logit_bias={eos: 60.0})
        got = ahead.generate(["def parse(line):\n"], params)[0].token_ids
        assert got == plain.generate(["def parse(line):\n"], params)[0].token_ids and len(got) == m + 1


def test_a_dropped_sequence_leaves_the_queued_propose_of_the_others():
    """PendingPropose.drop: the dropped sequence is no longer held (it is proposed afresh), the others' rows stay."""
    import torch

    from sparkdec.spec.chain import PendingPropose

    seqs = [object(), object(), object()]
    pending = PendingPropose(seqs, torch.arange(6).view(3, 2), torch.zeros(3, 2, 4), torch.ones(3, 2))
    pending.drop(seqs[1])
    assert pending.holds(seqs[0]) and not pending.holds(seqs[1]) and pending.take([seqs[1]]) is None
    assert pending.take([seqs[2], seqs[0]])[0].tolist() == [[4, 5], [0, 1]]


def test_a_step_after_a_refused_token_is_thrown_away_even_where_its_row_is_dead():
    """A step queued after a token the grammar refused (PendingStep.refused) commits nothing for that sequence, not
    even the dead end its row would give: the row followed a token that was never committed (engine/lookahead.py)."""
    import torch

    from sparkdec.engine.lookahead import Lookahead, PendingStep
    from sparkdec.engine.sequence import Sequence, Status

    seq = Sequence("a", [1, 2, 3], SamplingParams(max_tokens=10), 0, (), 100, output_ids=[5], status=Status.RUNNING,
                   num_computed=3)
    step = PendingStep([seq], [4], torch.tensor([7]), torch.tensor([7, 1]), None, epochs=[0], processed=[0],
                       refused={id(seq)})  # (its processed row's state 1: no token to choose)
    assert Lookahead(None, None)._commit(step) == []
    assert seq.finish_reason is None and seq.output_ids == [5] and seq.num_computed == 3
