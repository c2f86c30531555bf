"""Guided decoding (sparkdec/guided.py): outputs follow the JSON schema, regex, choice or grammar, each verify row is
masked as plain decoding masks that position, and bad specs get clear errors."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import torch

from sparkdec import LLM, SamplingParams
from sparkdec.engine.llm_engine import DEFAULT_PAIR
from sparkdec.errors import InvalidSamplingParamsError
from sparkdec.guided import Guided

pytest.importorskip("xgrammar")
pytestmark = pytest.mark.skipif(not (DEFAULT_PAIR / "draft" / "config.json").is_file(), reason="no shipped pair")

PROMPTS = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ", "The answer is"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "line": {"type": "integer", "minimum": 0, "maximum": 999}, "ok": {"type": "boolean"}},
          "required": ["name", "line", "ok"], "additionalProperties": False}
GUIDES = [Guided(json=SCHEMA, any_whitespace=False),  # (the shipped code model loops on any whitespace)
          Guided(regex=r"[a-z_]{1,12}\(\d{1,3}\)"), Guided(choice=("yes", "no", "not sure")),
          Guided(grammar='root ::= "def " name "(" name? "):"\nname ::= [a-z_]+')]


@pytest.fixture(scope="module")
def engines():
    return {"plain": LLM(draft=None, speculative=False), "spec": LLM(),
            "rejection": LLM(accept_mode="rejection")}


def _follows(guided: Guided, text: str) -> bool:
    if guided.json is not None:
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return (isinstance(value, dict) and set(value) == {"name", "line", "ok"} and isinstance(value["name"], str)
                and len(value["name"]) <= 12 and type(value["line"]) is int and 0 <= value["line"] <= 999
                and type(value["ok"]) is bool)
    if guided.regex is not None:
        return re.fullmatch(guided.regex, text) is not None
    if guided.choice is not None:
        return text in guided.choice
    return re.fullmatch(r"def [a-z_]+\(([a-z_]+)?\):", text) is not None


@pytest.mark.parametrize("guided", GUIDES, ids=["json_schema", "regex", "choice", "grammar"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_outputs_follow_the_guide_and_speculation_changes_nothing(engines, guided, temperature):
    params = SamplingParams(max_tokens=160, temperature=temperature, seed=7, guided=guided)
    plain = engines["plain"].generate(PROMPTS, params)
    spec = engines["spec"].generate(PROMPTS, params)
    for a, b in zip(plain, spec):
        assert a.token_ids == b.token_ids  # each verify row masked with the drafts before it, as plain decoding
        assert b.finish_reason == "stop", b.text  # the grammar ended with a stop token
        assert _follows(guided, b.text), b.text
    unguided = engines["spec"].generate(PROMPTS, SamplingParams(max_tokens=40, temperature=temperature, seed=7))
    assert not all(_follows(guided, o.text) for o in unguided)  # the guide is what made the outputs follow it
    for out in engines["rejection"].generate(PROMPTS, params):
        assert out.finish_reason == "stop" and _follows(guided, out.text), out.text


def test_any_json_and_a_mixed_batch(engines):
    llm = engines["spec"]
    params = [SamplingParams(max_tokens=200, guided={"json": True, "any_whitespace": False}), SamplingParams(max_tokens=30),
              SamplingParams(max_tokens=60, temperature=0.8, seed=1, guided=Guided(choice=("alpha", "beta")))]
    together = llm.generate(PROMPTS, params)
    for prompt, p, out in zip(PROMPTS, params, together):
        assert out.token_ids == llm.generate([prompt], p)[0].token_ids
    if together[0].finish_reason == "stop":
        assert isinstance(json.loads(together[0].text), dict)  # json=True: an object, as OpenAI's json_object
    assert together[2].text in ("alpha", "beta")


def test_matcher_rows_after_drafts_equal_rows_after_commits(engines):
    """allowed(drafts) gives row k the mask the matcher gives after committing drafts[:k], and leaves its state."""
    eng = engines["plain"].engine
    tok = eng.tokenizer
    matcher = eng.guides.matcher(Guided(json=SCHEMA), tok.eos_token_ids)
    drafts = tok.encode('{"name": "ab", "line')
    before = matcher.allowed([], 1, "cpu")
    rows = matcher.allowed(drafts, len(drafts) + 1, "cpu")
    assert torch.equal(matcher.allowed([], 1, "cpu"), before) and torch.equal(rows[0], before[0])
    fresh = eng.guides.matcher(Guided(json=SCHEMA), tok.eos_token_ids)
    for k, d in enumerate(drafts):
        assert torch.equal(fresh.allowed([], 1, "cpu")[0], rows[k]), k
        fresh.accept(d)
    assert torch.equal(fresh.allowed([], 1, "cpu")[0], rows[len(drafts)])
    refused = matcher.allowed([tok.encode("x")[0], 5], 3, "cpu")  # a first draft the grammar refuses
    assert refused[1:].all() and not refused[0].all()  # rows after it are never committed: left open
    assert not rows[0][list(tok.special_ids())].any()  # special tokens never appear inside the output


def test_a_rounds_tokens_checked_as_its_masks_would_allow_them(engines):
    """Matcher.allows(drafts, tokens): true exactly when every token along the drafts it accepts is one allowed()'s
    row allows (random tokens, grammar-following drafts, special and out-of-vocabulary ids), the state unchanged."""
    eng = engines["plain"].engine
    tok = eng.tokenizer
    matcher = eng.guides.matcher(Guided(json=SCHEMA), tok.eos_token_ids)
    matcher.accept(tok.encode("{")[0])
    drafts = tok.encode('"name": "ab", "line')
    rows = matcher.allowed(drafts, len(drafts) + 1, "cpu")
    before = matcher.allowed([], 1, "cpu")
    gen = torch.Generator().manual_seed(0)
    vocab = rows.shape[1]
    seen = set()
    for trial in range(300):
        tokens = list(drafts) + [0]
        cut = int(torch.randint(0, len(tokens), (1,), generator=gen))
        pick = int(torch.randint(0, 4, (1,), generator=gen))
        if pick == 0:  # any id
            tokens[cut] = int(torch.randint(0, vocab, (1,), generator=gen))
        elif pick == 1:  # one the row allows
            ok = rows[cut].nonzero().flatten()
            tokens[cut] = int(ok[torch.randint(0, ok.numel(), (1,), generator=gen)])
        elif pick == 2:
            tokens[cut] = sorted(tok.special_ids())[trial % len(tok.special_ids())]
        else:
            tokens[cut] = vocab + trial  # (past the vocabulary)
        path = next((k for k in range(len(tokens)) if k == len(drafts) or tokens[k] != drafts[k]), len(drafts))
        want = all(0 <= tokens[k] < vocab and bool(rows[k][tokens[k]]) for k in range(path + 1))
        assert matcher.allows(drafts, tokens) == want, (cut, tokens[cut])
        seen.add(want)
    assert seen == {True, False}
    assert matcher.fault is None and torch.equal(matcher.allowed([], 1, "cpu"), before)


def test_guided_tokens_are_checked_not_masked(engines, monkeypatch):
    """processed.GUIDED_CHECKED: greedy guided rows, and sampled ones drawn with no filter, go unmasked and their
    tokens are checked against the grammar after the read; a round the grammar refuses a token of is masked after it.
    The same tokens as masking every row, with speculation and without, beside a penalized request; a checked
    request's grammar fills a mask only where a check failed, a top-p request's every round."""
    from sparkdec import grammar_matcher
    from sparkdec.spec import processed

    fills, failed = [], []  # the matchers that filled masks; those whose check failed, a round at a time
    allowed, failed_checks = grammar_matcher.Matcher.allowed, processed.failed_checks
    monkeypatch.setattr(grammar_matcher.Matcher, "allowed", lambda self, *a: fills.append(self) or allowed(self, *a))

    def checks(spans, *a):
        out = failed_checks(spans, *a)
        failed.extend(seq.guide for seq, *_ in spans if id(seq) in out)
        return out

    monkeypatch.setattr(processed, "failed_checks", checks)
    prompts = PROMPTS + ['Reply in JSON: {"name": "parse", "line": 12, "ok": true}\n']
    params = [SamplingParams(max_tokens=100, guided=g) for g in GUIDES] + [
        SamplingParams(max_tokens=100, repetition_penalty=1.2, guided=GUIDES[0]),
        SamplingParams(max_tokens=100, temperature=0.9, seed=3, guided=GUIDES[1]),
        SamplingParams(max_tokens=100, temperature=0.9, seed=4, top_p=0.9, guided=GUIDES[0])]
    prompts = prompts + prompts[:3]
    got = {}
    for name in ("spec", "plain"):
        fills.clear(), failed.clear()
        got[name] = [o.token_ids for o in engines[name].generate(prompts, params)]
        matchers = list(dict.fromkeys(fills))  # (each request's, in the order of first fills: the first tokens)
        assert len(matchers) == len(prompts)
        filtered = [m for m in matchers if m not in failed and fills.count(m) > 1]
        for m in matchers:  # one mask for its first token (processed.first_token), then one per failed check
            assert fills.count(m) == 1 + failed.count(m) or m in filtered
        assert len(filtered) == 1 and filtered[0] not in failed  # (the top-p request: masked every round)
        assert failed and len(failed) < sum(fills.count(m) for m in matchers)
    assert got["spec"] == got["plain"]
    for guided, tokens in zip(params, got["spec"]):
        assert _follows(guided.guided, engines["spec"].engine.tokenizer.decode(tokens))
    monkeypatch.setattr(processed, "GUIDED_CHECKED", False)  # the reference: every row masked
    for name in ("spec", "plain"):
        assert [o.token_ids for o in engines[name].generate(prompts, params)] == got[name]


def test_kept_ids_are_a_rows_top_k_or_nothing():
    """processed.kept_ids: the ids sampling's top-k keeps in each row (those _filtered_probs leaves non-zero), or -1
    throughout where a tie at the k-th value or too few finite logits leave more or fewer than k."""
    from sparkdec.sampling import _filtered_probs
    from sparkdec.spec import processed

    inf = float("inf")
    rows = torch.tensor([[1.0, 5.0, 3.0, 4.0, 0.0], [1.0, 5.0, 4.0, 4.0, 0.0], [5.0, -inf, -inf, -inf, -inf],
                         [5.0, 4.0, -inf, -inf, -inf]])
    assert processed.kept_ids(rows, SamplingParams(temperature=0.7, top_k=2)).tolist() == [
        [1.0, 3.0], [-1.0, -1.0], [-1.0, -1.0], [0.0, 1.0]]
    near = torch.tensor([4.0, 3.0, 3.0, 1.0])  # (x / T at T = 1: the third value 1, 2, 3 ulps below the second)
    for ulps, want in ((1, -1), (2, 0), (3, 0)):
        near[2] = 3.0
        for _ in range(ulps):
            near[2] = torch.nextafter(near[2], torch.tensor(-inf))
        assert int(processed.kept_ids(near[None], SamplingParams(temperature=1.0, top_k=2))[0, 0]) == want, ulps
    x = torch.randn(16, 300, generator=torch.Generator().manual_seed(0))
    for k in (1, 5, 20):
        params = SamplingParams(temperature=0.8, top_k=k)
        kept = processed.kept_ids(x, params)
        for row, ids in zip(_filtered_probs(x, params), kept.long().tolist()):
            assert sorted(ids) == row.nonzero().flatten().tolist()


def test_kept_reader_reads_each_spans_rows_as_drawn():
    """processed.kept_reader batches asks with the same temperature and top-k together: each ask's kept ids are its
    own rows' (processed ones from the processed copies), in ask order."""
    from sparkdec.spec import processed

    gen = torch.Generator().manual_seed(2)
    rows, x = torch.randn(9, 50, generator=gen), torch.randn(3, 50, generator=gen)  # x: rows 4-6 processed
    a, b = SamplingParams(temperature=0.7, top_k=3), SamplingParams(temperature=1.2, top_k=5)
    asks = [(SimpleNamespace(params=p), r0, n) for r0, n, p in [(0, 2, a), (2, 2, b), (4, 3, a), (7, 2, a)]]
    got = processed.kept_reader(asks)(rows, [4, 5, 6], x)
    want = torch.cat([processed.kept_ids(rows[0:2], a).reshape(-1), processed.kept_ids(rows[2:4], b).reshape(-1),
                      processed.kept_ids(x, a).reshape(-1), processed.kept_ids(rows[7:9], a).reshape(-1)])
    assert torch.equal(got, want)


def test_a_top_k_rows_check_passes_only_where_masking_draws_the_same(engines):
    """A top-k row whose grammar allows every id it keeps (Matcher.allows with processed.kept_ids) draws the token
    masking it would have drawn; checking the drawn token alone would not do: rows whose drawn token the grammar
    allows, with a refused token among the kept, draw another token masked (random rows, top-k and refused tokens
    mixed at the top, with and without top-p)."""
    from sparkdec.sampling import sample_rows
    from sparkdec.spec import processed

    eng = engines["plain"].engine
    tok = eng.tokenizer
    matcher = eng.guides.matcher(Guided(json=SCHEMA), tok.eos_token_ids)
    matcher.accept(tok.encode("{")[0])
    mask = matcher.allowed([], 1, "cpu")[0]  # bool [V]
    vocab, allowed = mask.numel(), mask.nonzero().flatten()
    gen = torch.Generator().manual_seed(1)
    passed = unseen = 0
    for trial in range(600):
        params = SamplingParams(temperature=1.0, top_k=2, top_p=0.9) if trial % 2 else \
            SamplingParams(temperature=1.0, top_k=4)
        x = torch.randn(vocab, generator=gen)
        x[allowed[torch.randint(0, allowed.numel(), (params.top_k,), generator=gen)]] += 6.0  # (the top: k allowed ..
        x[torch.randint(0, vocab, (trial % 3,), generator=gen)] += 6.0  # .. and 0-2 others, mostly refused)
        drawn = int(sample_rows(x[None], params, trial, 9)[0])
        masked = int(sample_rows(x.masked_fill(~mask, float("-inf"))[None], params, trial, 9)[0])
        if matcher.allows([], [drawn], processed.kept_ids(x[None], params).long().tolist()):
            assert drawn == masked
            passed += 1
        elif matcher.allows([], [drawn]) and drawn != masked:
            unseen += 1
    assert passed and unseen


def test_top_k_guided_draws_are_checked_not_masked(engines, monkeypatch):
    """processed.FILTERED_CHECKED: a sampled guided request with a top-k (and top-p) goes unmasked where its grammar
    allows every token its rows' top-k keeps (read back with the round's tokens), masked after the read where it
    does not, and masked before the read for the next 1, 2, 4 .. rounds after such a refusal. The same tokens as
    masking every row, with speculation and without."""
    from sparkdec.spec import processed

    notes, note = [], processed.note_filtered_check
    monkeypatch.setattr(processed, "note_filtered_check", lambda seq, failed: notes.append(failed) or note(seq, failed))
    text = Guided(regex=r"[ -~\n]{1,400}")  # (code the model writes anyway: most of its top-k allowed)
    prompts = [PROMPTS[0], PROMPTS[1], 'Reply in JSON: {"name": "parse", "line": 12, "ok": true}\n']
    params = [SamplingParams(max_tokens=80, temperature=0.8, top_k=20, top_p=0.9, seed=5, guided=text),
              SamplingParams(max_tokens=80, temperature=1.0, top_k=5, seed=6, guided=text),
              SamplingParams(max_tokens=60, temperature=0.7, top_k=20, seed=7, guided=GUIDES[0])]
    got = {}
    for name in ("spec", "plain"):
        notes.clear()
        got[name] = [o.token_ids for o in engines[name].generate(prompts, params)]
        assert True in notes and False in notes  # (checks that passed and checks that failed)
    assert got["spec"] == got["plain"]
    for guided, tokens in zip(params, got["spec"]):
        assert _follows(guided.guided, engines["spec"].engine.tokenizer.decode(tokens))
    monkeypatch.setattr(processed, "GUIDED_CHECKED", False)  # the reference: every row masked
    notes.clear()
    for name in ("spec", "plain"):
        assert [o.token_ids for o in engines[name].generate(prompts, params)] == got[name]
    assert not notes


def test_checked_plain_decoding_goes_one_step_ahead(engines, monkeypatch):
    """Plain guided decoding whose tokens are checked (greedy, an unfiltered draw, a top-k draw with the ids it keeps)
    goes one step ahead once its grammar has allowed its tokens a few rounds running (processed.chains_checked); a
    token the grammar refuses there (or an id a top-k kept) is not committed, the step queued after it is thrown away
    and the round computes the row again, masked. The same tokens as decoding without the step ahead and as masking
    every row."""
    from sparkdec.engine.lookahead import Lookahead
    from sparkdec.spec import processed

    ahead = engines["plain"]
    look = ahead.engine.lookahead
    taken, refused, kept = [], [], []
    takes, allowed = look.takes, Lookahead._allowed
    monkeypatch.setattr(look, "takes", lambda batch, *a: (taken.append(tuple(s.params.top_k for s in batch.decode
                                                                             if s.guide))
                                                         if (ok := takes(batch, *a)) else None) or ok)

    def allowed_noted(self, seq, token, ids=None):
        kept.append(ids)
        return allowed(self, seq, token, ids) or refused.append(token)
    monkeypatch.setattr(Lookahead, "_allowed", allowed_noted)
    text = Guided(regex=r"[ -~\n]{1,400}")  # (code the model writes anyway: its top 10 mostly allowed)
    prompts = ['Reply in JSON: {"name": "parse", "line": 12, "ok": true}\n', "The answer is", PROMPTS[0], PROMPTS[0]]
    params = [SamplingParams(max_tokens=60, guided=GUIDES[0]), SamplingParams(max_tokens=60, guided=GUIDES[3]),
              SamplingParams(max_tokens=60, temperature=0.9, seed=2, guided=GUIDES[1]),
              SamplingParams(max_tokens=60, temperature=0.9, seed=2, top_k=10, top_p=0.9,
                             guided=text)]
    got = [[o.token_ids for o in ahead.generate([p], q)] for p, q in zip(prompts, params)]  # (one at a time)
    assert any(taken) and refused  # (guided steps went ahead; some of their tokens were refused there)
    assert (10,) in taken and any(ids is not None and len(ids[0]) == 10 for ids in kept)  # (top-k steps: checked)
    rounds = LLM(draft=None, speculative=False, lookahead=False)
    assert [[o.token_ids for o in rounds.generate([p], q)] for p, q in zip(prompts, params)] == got
    monkeypatch.setattr(processed, "GUIDED_CHECKED", False)  # the reference: every row masked, no step ahead
    taken.clear()
    assert [[o.token_ids for o in ahead.generate([p], q)] for p, q in zip(prompts, params)] == got
    assert not any(taken)


def test_a_top_k_step_ahead_without_its_kept_ids_is_refused(engines):
    """A top-k guided step ahead is committed only with the ids its top-k kept, checked: one queued before its grammar
    took over (no kept ids asked for) is refused, and the round computes its row again, masked."""
    from sparkdec.engine.lookahead import Lookahead

    engine = engines["plain"].engine
    seq = engine.add_request("The answer is", SamplingParams(max_tokens=20, temperature=0.9, top_k=5, seed=1,
                                                             guided=Guided(regex=r"[a-z ]{1,40}")))
    try:
        while not seq.output_ids:
            engine.step()
        seq.grammar_checked = True
        token = next(t for t in range(engine.target_cfg.vocab_size) if seq.guide.allows([], [t]))
        look = Lookahead(None, None)
        assert not look._allowed(seq, token, None) and look._allowed(seq, token, [[token]])
        assert not look._allowed(seq, token, [[token, -1]]) and seq.masked_rounds == 1  # (a refusal's backoff)
    finally:
        engine.abort(seq.request_id)


def test_a_refused_check_costs_work_not_tokens(engines, monkeypatch):
    """Checks that refuse tokens the grammar allows (every fifth) change no token, one step ahead or in the round:
    a refused step's token is computed again, masked, and the step queued after it is not committed."""
    from sparkdec import grammar_matcher

    prompts = ['Reply in JSON: {"name": "parse", "line": 12, "ok": true}\n', PROMPTS[0], PROMPTS[1]]
    text = Guided(regex=r"[ -~\n]{1,400}")  # (code the model writes anyway: steps ahead, refused only here)
    params = [SamplingParams(max_tokens=60, guided=GUIDES[0]), SamplingParams(max_tokens=80, guided=text),
              SamplingParams(max_tokens=80, temperature=0.9, seed=1, guided=text),
              SamplingParams(max_tokens=80, temperature=0.9, seed=2, top_k=10, guided=text)]
    prompts = prompts + prompts[1:2]
    want = [o.token_ids for o in engines["plain"].generate(prompts, params)]
    calls, allows = [], grammar_matcher.Matcher.allows
    monkeypatch.setattr(grammar_matcher.Matcher, "allows",
                        lambda self, *a: allows(self, *a) and (calls.append(1) or len(calls) % 5 != 0))
    for name in ("plain", "spec"):
        assert [o.token_ids for o in engines[name].generate(prompts, params)] == want
    assert len(calls) >= 10


def test_checked_rounds_that_chain_keep_the_drafters_context(engines, monkeypatch):
    """A checked round that chained its next propose (from the device's unmasked tokens) and then failed its check
    commits no further than those tokens went: the chained propose's block K/V overwrote the drafter's context from
    there on. Every round's drafts then equal, at each anchor both runs reach, those of rounds that never chain."""
    from sparkdec.spec import processed
    from sparkdec.spec import round as spec_round

    monkeypatch.setattr(spec_round, "GUIDED_DRAFTS", False)  # (the drafter's own drafts, as on CUDA: rounds chain)
    monkeypatch.setattr(processed, "CHAIN_BELOW", 2.0)  # (every checked round chains, failing or not)
    llm, checks = engines["spec"], []
    failed_checks = processed.failed_checks
    monkeypatch.setattr(processed, "failed_checks", lambda *a: checks.append(failed_checks(*a)) or checks[-1])
    params = [SamplingParams(max_tokens=100, guided=g) for g in GUIDES]
    runs = []
    for ahead in (True, False):
        monkeypatch.setattr(llm.engine.rounds, "ahead", ahead)
        runs.append(llm.generate(PROMPTS[:1] * len(params), params, trace=True))
    assert any(checks)
    compared = 0
    for chained, alone in zip(*runs):
        assert chained.token_ids == alone.token_ids
        drafts = {r["anchor_position"]: r["draft_token_ids"] for r in alone.rounds}
        for r in chained.rounds:
            if r["anchor_position"] in drafts:
                assert r["draft_token_ids"] == drafts[r["anchor_position"]], r["anchor_position"]
                compared += 1
    assert compared > len(params)


def test_bad_guides_are_refused(engines):
    llm = engines["plain"]
    for guided, match in [(Guided(regex="(ab"), "the guided regex does not compile: .*parenthesis"),
                          (Guided(json={"type": "object", "properties": 5}), "the guided json does not compile"),
                          (Guided(grammar="root ::= ("), "the guided grammar does not compile")]:
        with pytest.raises(InvalidSamplingParamsError, match=match):
            llm.generate(["x"], SamplingParams(guided=guided))
    with pytest.raises(InvalidSamplingParamsError, match="exactly one of json, regex, choice, grammar"):
        Guided(json=True, regex="a")
    with pytest.raises(InvalidSamplingParamsError, match="non-empty list"):
        Guided(choice=())
    with pytest.raises(InvalidSamplingParamsError, match="ignore_eos cannot be combined"):
        SamplingParams(guided=Guided(json=True), ignore_eos=True)
    assert llm.generate(["x"], SamplingParams(max_tokens=3))[0].token_ids  # the engine still serves


def test_guided_needs_a_tokenizer(targets):
    llm = LLM(model=str(targets["untied_mha"]), device="cpu")  # random checkpoints have no tokenizer.json
    with pytest.raises(InvalidSamplingParamsError, match="needs the model's tokenizer"):
        llm.generate([[3, 4, 5]], SamplingParams(guided=Guided(json=True)))


def test_forced_tool_calls_follow_their_schemas(engines):
    """Guided(tool_calls=...): Qwen3 <tool_call> blocks, at most max_calls, each naming an offered tool with arguments
    that follow its schema; the same tokens with speculation on and off."""
    from sparkdec.server import tools

    weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}}, "required": ["city"]}
    clock = {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["tz"]}
    prompt = engines["spec"].engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the weather in Paris, and the time?"}])
    for max_calls in (1, 2):
        params = SamplingParams(max_tokens=300, temperature=0.8, seed=3, guided=Guided(
            tool_calls=(("get_weather", weather), ("get_time", clock)), max_calls=max_calls))
        out = engines["spec"].generate([prompt], params)[0]
        assert out.token_ids == engines["plain"].generate([prompt], params)[0].token_ids
        content, calls = tools.parse(out.text)
        assert out.finish_reason == "stop" and content is None and 1 <= len(calls) <= max_calls, out.text
        for call in calls:
            args = json.loads(call["function"]["arguments"])
            assert (set(args) == {"city"}) if call["function"]["name"] == "get_weather" else args["tz"] in ("UTC", "CET")
    with pytest.raises(InvalidSamplingParamsError, match="the guided tool_calls does not compile"):
        engines["plain"].generate(["x"], SamplingParams(guided=Guided(tool_calls=(("f", {"type": 3}),))))


def test_drafts_follow_the_grammar(engines):
    """Guided sequences draft only what their grammar allows (spec/round.py GUIDED_DRAFTS): every proposed block,
    replayed on a fresh matcher after the committed tokens before it, is accepted up to the grammar's end; and the
    committed tokens are the ones unguided drafts give."""
    from sparkdec.spec import round as spec_round

    llm = engines["spec"]
    guided = Guided(json=SCHEMA, any_whitespace=False)
    params = SamplingParams(max_tokens=120, guided=guided)
    out = llm.generate(PROMPTS[:1], params, trace=True)[0]
    prompt_len = len(llm.engine.tokenizer.encode(PROMPTS[0]))  # (position prompt_len holds the first output token)
    eos = llm.engine.tokenizer.eos_token_ids
    for r in out.rounds:
        m = llm.engine.guides.matcher(guided, eos)
        for t in out.token_ids[:r["anchor_position"] - prompt_len + 1]:
            m.accept(t)
        for d in r["draft_token_ids"]:
            if m._first.is_terminated():
                break
            assert m._first.accept_token(d), (r, d)
    before = spec_round.GUIDED_DRAFTS, spec_round.FORCED_DRAFTS
    spec_round.GUIDED_DRAFTS = spec_round.FORCED_DRAFTS = False  # (the drafter's own drafts, forced text included)
    try:
        unguided = llm.generate(PROMPTS[:1], params)[0]
    finally:
        spec_round.GUIDED_DRAFTS, spec_round.FORCED_DRAFTS = before
    assert unguided.token_ids == out.token_ids and unguided.stats["rounds"] > out.stats["rounds"]


def test_a_grammar_that_leads_nowhere_ends_only_its_request(engines):
    """A grammar that compiles but after some text allows no token (or penalties that overflow) ends its request with
    an error of its own; the requests beside it go on with their own tokens."""
    llm = engines["spec"]
    alone = llm.generate([PROMPTS[1]], SamplingParams(max_tokens=20))[0]
    dead = [Guided(regex="ab[^\\s\\S]"), Guided(grammar='root ::= "a" b\nb ::= b "c"')]
    outs = llm.generate([PROMPTS[0], PROMPTS[0], PROMPTS[1]],
                        [SamplingParams(max_tokens=20, guided=dead[0]),
                         SamplingParams(max_tokens=20, temperature=0.8, seed=1, guided=dead[1]),
                         SamplingParams(max_tokens=20)])
    assert [o.finish_reason for o in outs] == ["error", "error", "length"]
    assert outs[0].text == "ab" and outs[1].text == "a" and "no token can follow" in outs[0].error
    assert outs[2].token_ids == alone.token_ids and outs[2].error is None
    late = [SamplingParams(max_tokens=30, guided=Guided(regex="abcdefgh[^\\s\\S]"), logprobs=1)]
    spec, plain = llm.generate(["x"], late, trace=True)[0], engines["plain"].generate(["x"], late)[0]
    assert spec.error == plain.error and spec.token_ids == plain.token_ids and spec.logprobs == plain.logprobs
    assert spec.text == "abcdefgh" and len(spec.logprobs) == len(spec.token_ids)  # every committed token scored
    assert sum(r["num_committed"] for r in spec.rounds) + 1 == len(spec.token_ids)  # every round recorded
    for j, r in enumerate(spec.rounds):  # (anchors: the prompt's one token, then what the rounds before committed)
        assert r["anchor_position"] == 1 + sum(q["num_committed"] for q in spec.rounds[:j])
    comma = llm.engine.tokenizer.encode(",")[0]  # a stop id the grammar needs: the request stops there
    out = llm.generate(["x"], SamplingParams(max_tokens=20, guided=Guided(regex="ab,cd"), stop_token_ids=[comma]))[0]
    assert out.finish_reason == "stop" and out.text == "ab," and out.token_ids[-1] == comma


def test_tool_schemas_with_definitions_and_checked_fields(engines):
    city = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}}, "required": ["name"]}
    params = {"type": "object", "properties": {"city": {"$ref": "#/$defs/City"}}, "required": ["city"],
              "$defs": {"City": city}}
    out = engines["spec"].generate(["Weather?"], SamplingParams(
        max_tokens=200, guided=Guided(tool_calls=(("get_weather", params),))))[0]
    call = json.loads(out.text.split("\n")[1])
    assert call["name"] == "get_weather" and set(call["arguments"]["city"]) == {"name"}
    for kw, match in [(dict(json=5), "guided json must be true"), (dict(regex=5), "guided regex must be a string"),
                      (dict(choice="abc"), "non-empty list of non-empty strings"),
                      (dict(tool_calls=()), "non-empty list of"),
                      (dict(tool_calls=(("f", "{not json"),)), "parameters are not JSON")]:
        with pytest.raises(InvalidSamplingParamsError, match=match):
            Guided(**kw)
    with pytest.raises(InvalidSamplingParamsError, match="stop_token_ids must be token ids"):
        SamplingParams(stop_token_ids=[-1])
    with pytest.raises(InvalidSamplingParamsError, match="stop_token_ids names token ids"):
        engines["plain"].generate(["x"], SamplingParams(stop_token_ids=[10 ** 7]))


@pytest.mark.parametrize("unmasked", [True, False])
def test_a_thinking_block_decodes_unprocessed_up_to_its_close(unmasked, monkeypatch):
    """Inside the thinking block a guided request's rows are the model's own (processed.THINKING_UNMASKED): one read
    a round, its propose chained, its tokens kept through the close token when drafts run past it; the same tokens as
    rows walked through the grammar (the reference, off), speculative or plain, greedy or sampled."""
    from sparkdec.spec import processed

    cuts = []
    real = processed.through_close
    monkeypatch.setattr(processed, "through_close", lambda seq, t: cuts.append(len(t) - real(seq, t)) or real(seq, t))
    params = [SamplingParams(max_tokens=90, temperature=t, seed=4,
                             guided=Guided(regex=r" [0-9]{1,4}", thinking=("):", "Ġ="))) for t in (0.0, 0.8)]
    prompts = ["def parse(line):", "def add(a, b):"]  # (each opens the block)
    spec, plain = LLM(device="cpu"), LLM(draft=None, speculative=False)
    rounds, chained = spec.engine.rounds, []
    chains = rounds._chains
    monkeypatch.setattr(rounds, "_chains", lambda *a: chained.append(chains(*a)) or chained[-1])
    monkeypatch.setattr(processed, "THINKING_UNMASKED", unmasked)
    got = [[o.token_ids for o in llm.generate(prompts, params)] for llm in (spec, plain)]
    monkeypatch.setattr(processed, "THINKING_UNMASKED", False)
    want = [[o.token_ids for o in llm.generate(prompts, params)] for llm in (spec, plain)]
    assert got == want and got[0] == got[1]
    close = spec.engine.tokenizer.token_to_id("Ġ=")
    assert all(close in t for t in got[0])
    assert any(cuts) if unmasked else not cuts
    chained.clear()
    monkeypatch.setattr(processed, "THINKING_UNMASKED", unmasked)
    spec.generate(prompts[:1], params[0])  # (one greedy request: its rounds may chain)
    assert any(chained) == unmasked


def test_grammar_after_a_thinking_block(engines):
    """Guided(thinking=(open, close)): an output that begins with the open token is free up to the close token, then
    follows the grammar (newlines may come first); one that does not begin so follows it from its first token; a
    prompt that opened the block begins inside it. Speculation changes nothing. (Qwen3's <think> / </think> stand in
    for tokens the shipped code model writes.)"""
    tok = engines["spec"].engine.tokenizer
    regex = r" [0-9]{1,4}"
    opener = tok.token_to_id("ĠĠĠ")  # (the byte-level pieces of "   " and " =")
    for temperature in (0.0, 0.8):
        params = SamplingParams(max_tokens=120, temperature=temperature, seed=2,
                                guided=Guided(regex=regex, thinking=("ĠĠĠ", "Ġ=")))
        out = engines["spec"].generate(PROMPTS[:2], params)
        assert [o.token_ids for o in out] == [o.token_ids for o in engines["plain"].generate(PROMPTS[:2], params)]
        for o in out:
            assert o.finish_reason == "stop", o.text
            if o.token_ids[0] == opener:
                head, _, tail = o.text.partition(" =")
                assert re.fullmatch(r"\n*" + regex, tail), o.text
            else:
                assert re.fullmatch(regex, o.text), o.text
        assert {o.token_ids[0] == opener for o in out} == {True, False}  # both ways are taken
    opened = engines["spec"].generate(["def parse(line):"], SamplingParams(
        max_tokens=120, guided=Guided(regex=regex, thinking=("):", "Ġ="))))[0]  # the prompt ends with "):"
    head, _, tail = opened.text.partition(" =")
    assert head and re.fullmatch(r"\n*" + regex, tail), opened.text
    guides, ids = engines["spec"].engine.guides, tok.encode("x =")  # a prompt that ends with the open token " ="
    assert guides.opened(ids, tok.token_to_id("Ġ=")) and guides.opened(ids + tok.encode("\n"), tok.token_to_id("Ġ="))
    assert not guides.opened(tok.encode("x = 1"), tok.token_to_id("Ġ="))
    with pytest.raises(InvalidSamplingParamsError, match="guided thinking must name two tokens"):
        engines["plain"].generate(["x"], SamplingParams(guided=Guided(json=True, thinking=("<think>", "</think>"))))

def test_refused_tokens_and_bad_logits_are_the_servers_fault():
    """A token the grammar's own mask allowed but refuses (an xgrammar fault) is not committed and ends the request
    as a server error; a row with NaN or +inf is the model's, a row of -inf the request's."""
    from types import SimpleNamespace

    from sparkdec.engine.sequence import Sequence
    from sparkdec.spec.commit import commit_tokens
    from sparkdec.spec.processed import dead_rows

    seq = Sequence("r", [1, 2], SamplingParams(max_tokens=10, stop=["c"]), 0, (), 100)
    seq.guide = SimpleNamespace(accept=lambda t: t != 9)
    text = {5: "a", 9: "c", 6: "d"}
    assert commit_tokens(seq, [5, 9, 6], lambda ids, _=True: "".join(text[i] for i in ids)) == 1  # (a stop string "c"
    # would have matched the refused token's text)
    assert seq.output_ids == [5] and seq.finish_reason == "error" and not seq.error_own
    inf = float("inf")
    rows = {1: torch.tensor([[0.0, 1.0], [-inf, -inf]]), 2: torch.tensor([[0.0, float("nan")]]),
            3: torch.tensor([[inf, 0.0]]), 4: torch.tensor([[-inf, 2.0]])}
    assert dead_rows(rows) == {1: (1, True), 2: (0, False), 3: (0, False)}


def test_the_server_compiles_grammars_off_the_engine_thread(engines):
    """The server's engine loop takes a guided request's matcher built on a worker thread (a new grammar does not
    stall the requests in flight) and decodes what the engine alone decodes; a bad grammar is refused there."""
    import asyncio
    import threading

    from sparkdec.server.engine_loop import EngineLoop

    llm = engines["spec"]
    engine, compiled_on = llm.engine, []
    compile_ = engine.guides.compile
    engine.guides.compile = lambda *a, **k: (compiled_on.append(threading.current_thread().name), compile_(*a, **k))[1]
    params = SamplingParams(max_tokens=80, temperature=0.0, guided=Guided(regex=r"[a-z]{3,9}_v\d"))
    ids = engine.tokenizer.encode(PROMPTS[0])
    loop = EngineLoop(engine)
    loop.start()

    async def serve(request_params: SamplingParams):
        handle = loop.submit("off-thread", ids, request_params, await loop.prepare_guide(ids, request_params))
        await handle.added
        while not handle.done:
            await handle.next()
        return handle.latest

    try:
        snap = asyncio.run(serve(params))
        with pytest.raises(InvalidSamplingParamsError, match="the guided regex does not compile"):
            asyncio.run(serve(SamplingParams(guided=Guided(regex="(ab"))))
    finally:
        loop.stop()
        engine.guides.compile = compile_
    assert compiled_on and "sparkdec-engine" not in compiled_on, compiled_on
    assert snap.finish_reason == "stop" and snap.text == llm.generate([ids], params)[0].text


def test_forced_text_is_drafted_and_changes_no_token(engines, monkeypatch):
    """The text a grammar forces next (a JSON object's opening key) is drafted as the tokenizer writes it
    (round.FORCED_DRAFTS), with the drafter's own guided drafts off as on CUDA: more tokens per round, the same
    tokens as without, greedy and exact-sampled; rejection-sampled drafts are left to the drafter."""
    from sparkdec.spec import round as spec_round

    tok = engines["spec"].engine.tokenizer
    matcher = engines["spec"].engine.guide_for([1, 2], SamplingParams(guided=GUIDES[0]))
    assert tok.decode(matcher.forced(7)) == '{"name": "' and len(matcher.forced(2)) == 2
    monkeypatch.setattr(spec_round, "GUIDED_DRAFTS", False)
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}]) for q in ("Describe parse.", "A record?")]
    params = [SamplingParams(max_tokens=80, guided=GUIDES[0]),
              SamplingParams(max_tokens=80, temperature=0.7, seed=3, guided=GUIDES[2])]
    runs = {}
    for forced in (False, True):
        monkeypatch.setattr(spec_round, "FORCED_DRAFTS", forced)
        outs = engines["spec"].generate(prompts, params)
        runs[forced] = ([o.token_ids for o in outs], sum(o.stats["rounds"] for o in outs))
        for name in ("plain", "rejection"):
            assert [o.token_ids for o in engines[name].generate(prompts, params)][:1] == runs[forced][0][:1]
    assert runs[True][0] == runs[False][0] and runs[True][1] < runs[False][1]
    assert all(json.loads(t) for t in [engines["spec"].engine.tokenizer.decode(runs[True][0][0])])


@pytest.mark.parametrize("past", [1, 2])
def test_a_dead_row_past_a_thinking_blocks_close_is_not_the_requests(past, monkeypatch):
    """A row after a thinking block's close draft that reports non-finite logits (made so here) was chosen without
    the grammar: the row right after the close is done again under it next round, later ones belong to tokens the
    round does not keep. The request goes on and writes what it writes without them."""
    from sparkdec.spec import processed

    real, hits = processed.device_processing, []

    def marked(spans, guided=None):
        process = real(spans, guided)

        def run(rows):
            at, x, states = process(rows)
            states, base = states.clone(), 0
            for seq, r0, n, drafts, first in spans:
                close = seq.guide.close_id if processed.thinking(seq) else None
                d = drafts[:n - 1].tolist() if drafts is not None else []
                if close in d and d.index(close) + past < n:
                    states[base + d.index(close) + past] = 2  # (a NaN row past the close)
                    hits.append(d.index(close))
                base += n
            return at, x, states
        return run

    llm = LLM(device="cpu")
    params = SamplingParams(max_tokens=90, logit_bias={5: 0.0},  # (a rewrite: rows processed on the device)
                            guided=Guided(regex=r" [0-9]{1,4}", thinking=("):", "Ġ=")))
    want = [o.token_ids for o in llm.generate(["def parse(line):", "def add(a, b):"], params)]
    monkeypatch.setattr(processed, "device_processing", marked)
    got = llm.generate(["def parse(line):", "def add(a, b):"], params)
    assert hits and [o.token_ids for o in got] == want and all(o.error is None for o in got)


def test_forced_text_that_ends_inside_a_character_drafts_nothing_forced():
    """Choices that share a character's first byte leave xgrammar a forced text it cannot decode: no forced drafts,
    and the request decodes as plain decoding does."""
    guided = Guided(json={"type": "object", "properties": {"city": {"enum": ["北京", "南京"]}}, "required": ["city"]},
                    any_whitespace=False)
    llm = LLM(device="cpu")
    matcher = llm.engine.guide_for([1, 2], SamplingParams(guided=guided))
    for token in llm.engine.tokenizer.encode('{"city": "'):
        matcher.accept(token)
    assert matcher.forced(8) == []
    params = SamplingParams(max_tokens=30, guided=guided)
    out = llm.generate(["The capital is"], params)[0]
    assert out.token_ids == LLM(draft=None, speculative=False).generate(["The capital is"], params)[0].token_ids
    assert json.loads(out.text)["city"] in ("北京", "南京")


def test_a_grammar_engine_failure_ends_only_its_request(monkeypatch):
    """xgrammar raising inside one request's matcher (made so here) fails that request with a message naming the
    fault, before it commits a token the grammar did not check; the request beside it writes what it writes alone."""
    from sparkdec import grammar_matcher

    llm = LLM(device="cpu")
    eng, params = llm.engine, SamplingParams(max_tokens=40, guided=GUIDES[1])
    alone = llm.generate([PROMPTS[1]], params)[0].token_ids
    victim = eng.add_request(PROMPTS[0], params)
    other = eng.add_request(PROMPTS[1], params)
    real = grammar_matcher._Walk.mask_into

    def failing(walk, bits, row):
        if walk.o is victim.guide and len(victim.output_ids) >= 2:
            raise RuntimeError("mask failed")
        return real(walk, bits, row)
    monkeypatch.setattr(grammar_matcher._Walk, "mask_into", failing)
    while eng.has_unfinished():
        eng.step()
    assert victim.finish_reason == "error" and "mask failed" in victim.error and not victim.error_own
    assert len(victim.output_ids) >= 2 and other.error is None and other.output_ids == alone


@pytest.mark.parametrize("guided_drafts", [False, True])
def test_guided_rows_are_masked_before_the_rounds_one_read(engines, guided_drafts, monkeypatch):
    """processed.GUIDED_ON_DEVICE: a guided request's verify rows are masked with the other processing before the
    round's one read (its drafts walked on the host while the verify runs): no row is processed after the read, its
    rounds chain the next propose where the drafter's own guided drafts are off (as on CUDA), and the tokens are
    those masked after the read and plain decoding's, greedy and sampled, beside penalized and unprocessed requests."""
    from sparkdec.spec import processed
    from sparkdec.spec import round as spec_round

    monkeypatch.setattr(spec_round, "GUIDED_DRAFTS", guided_drafts)
    monkeypatch.setattr(processed, "GUIDED_CHECKED", False)  # (greedy rows masked too, not checked after the read)
    after, chained = [], []
    spans_after = processed.process_spans
    monkeypatch.setattr(processed, "process_spans", lambda spans, *a: after.extend(
        s for s, *_ in spans if processed.processes_now(s)) or spans_after(spans, *a))
    rounds = engines["spec"].engine.rounds
    chains = rounds._chains
    monkeypatch.setattr(rounds, "_chains", lambda *a: chained.append(chains(*a)) or chained[-1])
    prompts = PROMPTS + ["class Stack:\n"]
    params = [SamplingParams(max_tokens=100, guided=GUIDES[0]),
              SamplingParams(max_tokens=100, temperature=0.8, seed=3, guided=GUIDES[1]),
              SamplingParams(max_tokens=40, repetition_penalty=1.2), SamplingParams(max_tokens=40)]
    got = [o.token_ids for o in engines["spec"].generate(prompts, params)]
    assert not after
    assert all(_follows(g.guided, engines["spec"].engine.tokenizer.decode(t)) for g, t in zip(params[:2], got))
    chained.clear()
    engines["spec"].generate(prompts[:1], params[0])  # (one greedy guided request: its rounds may chain)
    assert any(chained) == (not guided_drafts)
    monkeypatch.setattr(processed, "GUIDED_ON_DEVICE", False)  # the reference: masked after the read
    assert [o.token_ids for o in engines["spec"].generate(prompts, params)] == got
    assert after
    chained.clear()
    engines["spec"].generate(prompts[:1], params[0])
    assert not any(chained)  # (a second read: the next propose waits for it)
    assert [o.token_ids for o in engines["plain"].generate(prompts, params)] == got


def test_grammars_walked_together_give_each_ones_masks(engines, monkeypatch):
    """grammar_matcher.allowed_rows walks several requests' grammars depth by depth with xgrammar's batch matcher:
    each request's rows are those Matcher.allowed gives it alone (drafts the grammar refuses, a thinking block
    before, inside and closed by a draft, a finished choice), the matchers are left as they were, and an xgrammar
    failure falls back to one request at a time."""
    from sparkdec import grammar_matcher

    eng = engines["plain"].engine
    tok = eng.tokenizer
    thinking = Guided(regex=r" [0-9]{1,4}", thinking=("):", "Ġ="))

    def matcher(guided, ids=()):
        m = eng.guide_for([1, 2], SamplingParams(guided=guided))
        for t in ids:
            m.accept(t)
        return m
    close, opener = tok.token_to_id("Ġ="), tok.token_to_id("):")
    asks = [(matcher(GUIDES[0]), tok.encode('{"name": "ab", "line'), 8),
            (matcher(GUIDES[1]), tok.encode("x") + [5, 6], 4),  # (its first draft refused: later rows free)
            (matcher(GUIDES[2], tok.encode("yes")), [], 1),  # (finished: only the end)
            (matcher(thinking), [opener] + tok.encode(" 1"), 4),  # (before the block, may open it)
            (matcher(thinking, [opener]), tok.encode(" x") + [close] + tok.encode(" 12"), 6),  # (closed in the drafts)
            (matcher(thinking, [opener]), tok.encode(" x y"), 3),  # (inside, no close: no mask)
            (matcher(GUIDES[3]), tok.encode("def f"), 5)]
    asks = [(m, d, min(n, len(d) + 1)) for m, d, n in asks]  # (a row per draft, and one after)
    alone = [m.allowed(d, n, "cpu") for m, d, n in asks]
    before = [m.allowed([], 1, "cpu") for m, _, _ in asks]
    together = grammar_matcher.allowed_rows(asks, "cpu", together=True)
    assert [a is None for a in together] == [a is None for a in alone] == [False] * 5 + [True, False]
    assert all(torch.equal(a, b) for a, b in zip(together, alone) if a is not None)
    after = [m.allowed([], 1, "cpu") for m, _, _ in asks]
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(before, after))

    def failing():
        raise RuntimeError("batch matcher failed")
    monkeypatch.setattr(grammar_matcher, "_batch", failing)
    again = grammar_matcher.allowed_rows(asks, "cpu", together=True)
    assert all(torch.equal(a, b) for a, b in zip(again, alone) if a is not None)
    monkeypatch.undo()
    real, steps = grammar_matcher._Walk.step, []

    def failing_late(walk, token):  # (xgrammar failing mid-walk, drafts already taken by the walks)
        steps.append(token)
        if len(steps) == 12:
            raise RuntimeError("accept failed")
        return real(walk, token)
    monkeypatch.setattr(grammar_matcher._Walk, "step", failing_late)
    late = grammar_matcher.allowed_rows(asks, "cpu", together=True)
    monkeypatch.undo()
    assert all(torch.equal(a, b) for a, b in zip(late, alone) if a is not None) and len(steps) > 12  # (then alone)
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in
               zip(before, [m.allowed([], 1, "cpu") for m, _, _ in asks]))


def test_metrics_count_checked_and_refused_guided_rounds():
    """/metrics: sparkdec:guided_checks_total and sparkdec:guided_check_refusals_total, the guided rounds checked
    after the read (here a greedy JSON-schema request) and those the grammar refused."""
    from fastapi.testclient import TestClient

    from sparkdec.server.app import create_app

    engine = LLM().engine
    with TestClient(create_app(engine, "tiny")) as client:
        body = {"model": "tiny", "prompt": PROMPTS[0], "max_tokens": 40, "temperature": 0.0,
                "guided_json": SCHEMA}
        assert client.post("/v1/completions", json=body).status_code == 200
        text = client.get("/metrics").text
    counts = {name: float(re.search(rf"^sparkdec:{name}_total (\S+)$", text, re.M).group(1))
              for name in ("guided_checks", "guided_check_refusals")}
    assert counts["guided_checks"] == sum(engine.rounds.guided_checks[:1] + engine.lookahead.guided_checks[:1]) > 0
    assert counts["guided_check_refusals"] == engine.rounds.guided_checks[1] + engine.lookahead.guided_checks[1]
