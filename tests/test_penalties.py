"""Logit processing (logit_bias, repetition / frequency / presence penalties, min_p): against a direct reference and
Hugging Face transformers, and unchanged by speculation."""
from __future__ import annotations

import math

import pytest
import torch

from sparkdec import LLM, SamplingParams
from sparkdec.engine.llm_engine import DEFAULT_PAIR
from sparkdec.errors import InvalidSamplingParamsError
from sparkdec.penalties import processed_rows, processes

PROMPTS = [[1, 5, 9, 33, 2, 7, 100, 4], [17, 3, 250, 250, 11, 90, 8, 8, 8, 1, 2, 3, 45, 6, 77, 120, 5]]
SHIPPED = (DEFAULT_PAIR / "draft" / "config.json").is_file()


def _reference_row(logits: list[float], params: SamplingParams, prompt: list[int], history: list[int]) -> list[float]:
    """One row processed token by token in Python floats, as the parameters' documentation reads."""
    x = list(logits)
    for t, b in params.logit_bias:
        x[t] += b
    for t in range(len(x)):
        count = history.count(t)
        if count or t in prompt:
            rp = params.repetition_penalty
            x[t] = x[t] / rp if x[t] > 0 else x[t] * rp
        x[t] -= params.frequency_penalty * count + params.presence_penalty * (count > 0)
    if params.min_p and not params.greedy:
        top = max(x) / params.temperature
        x = [v if math.exp(v / params.temperature - top) >= params.min_p else -math.inf for v in x]
    return x


@pytest.mark.parametrize("params", [
    SamplingParams(repetition_penalty=1.7),
    SamplingParams(frequency_penalty=0.6, presence_penalty=-0.4, logit_bias={3: 5.0, 40: -100.0}),
    SamplingParams(temperature=0.7, min_p=0.2, repetition_penalty=0.8, presence_penalty=1.5),
])
def test_processed_rows_match_a_direct_reference(params):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 50, generator=gen) * 3  # [n, V]: rows after output + drafts[:k], k = 0 .. 3
    prompt, output, drafts = [1, 2, 2, 30], [5, 7, 5, 2], [7, 9, 9]
    got = processed_rows(logits, params, prompt, output, drafts)
    for k in range(4):
        ref = torch.tensor(_reference_row(logits[k].tolist(), params, prompt, output + drafts[:k]))
        assert torch.equal(torch.isinf(got[k]), torch.isinf(ref))
        finite = torch.isfinite(ref)
        torch.testing.assert_close(got[k][finite], ref[finite].float(), atol=1e-5, rtol=1e-6)
    # each row's bits are the ones it gets processed alone (plain decoding processes one row at a time)
    for k in range(4):
        alone = processed_rows(logits[k:k + 1], params, prompt, output + drafts[:k], [])
        assert torch.equal(alone[0], got[k])


def test_greedy_with_repetition_penalty_and_bias_matches_transformers(targets):
    from transformers import AutoModelForCausalLM

    path = targets["untied_mha"]
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    params = SamplingParams(max_tokens=40, ignore_eos=True, repetition_penalty=1.8, logit_bias={77: 2.5})
    outs = LLM(model=str(path), device="cpu").generate(PROMPTS, params)
    plain = LLM(model=str(path), device="cpu").generate(PROMPTS, SamplingParams(max_tokens=40, ignore_eos=True))
    for prompt, out, base in zip(PROMPTS, outs, plain):
        ref = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=40, min_new_tokens=40,
                          repetition_penalty=1.8, sequence_bias={(77,): 2.5},
                          attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        assert out.token_ids == ref[0, len(prompt):].tolist()
        assert out.token_ids != base.token_ids  # the processing changed the output


def test_min_p_keeps_only_tokens_near_the_top(targets):
    path = targets["untied_mha"]
    llm = LLM(model=str(path), device="cpu")
    prompt = PROMPTS[0]
    eng = llm.engine
    eng.blocks.reserve(table := [], len(prompt))
    hidden, _ = eng.runner.target_forward([(table, prompt, list(range(len(prompt))))])
    probs = torch.softmax(eng.runner.logits(hidden[-1:])[0] / 1.5, dim=-1)
    allowed = set(torch.nonzero(probs >= 0.5 * probs.max()).flatten().tolist())
    def drawn(min_p: float) -> set[int]:
        return {llm.generate([prompt], SamplingParams(max_tokens=1, temperature=1.5, min_p=min_p, seed=s))[0].token_ids[0]
                for s in range(40)}

    kept = drawn(0.5)
    assert kept <= allowed and len(kept) > 1
    assert not drawn(0.0) <= allowed  # without min_p the same seeds draw tokens it drops


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=56, ignore_eos=True, repetition_penalty=1.3, logit_bias={10: 2.0}),
    SamplingParams(max_tokens=56, ignore_eos=True, presence_penalty=0.8, frequency_penalty=0.5),
    SamplingParams(max_tokens=56, ignore_eos=True, temperature=0.8, seed=5, min_p=0.1, presence_penalty=0.5),
])
def test_speculation_leaves_processed_output_unchanged(params, monkeypatch):
    from sparkdec.spec import processed
    from sparkdec.spec import round as spec_round

    prompts = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    "]
    plain = LLM(draft=None, speculative=False).generate(prompts, params)
    spec = LLM().generate(prompts, params)
    monkeypatch.setattr(processed, "DEVICE_PROCESSING", False)  # the reference: rows processed after the read
    after = LLM().generate(prompts, params)
    monkeypatch.setattr(spec_round, "PROCESSED_DRAFTS", True)  # drafts from logits rewritten as the rows will be
    assert [o.token_ids for o in LLM().generate(prompts, params)] == [o.token_ids for o in spec]
    assert [o.token_ids for o in after] == [o.token_ids for o in spec]
    base = LLM().generate(prompts, SamplingParams(max_tokens=56, ignore_eos=True, temperature=params.temperature,
                                                  seed=params.seed))
    for a, b, c in zip(plain, spec, base):
        assert b.stats["num_accepted_tokens"] > 0  # verify rows with drafts in their history were processed
        assert a.token_ids == b.token_ids and a.token_ids != c.token_ids


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
def test_processed_and_plain_requests_share_a_batch():
    prompts = ["def parse(line):\n", "class Stack:\n", "import os\n"]
    each = [SamplingParams(max_tokens=40, ignore_eos=True, frequency_penalty=1.0),
            SamplingParams(max_tokens=40, ignore_eos=True),
            SamplingParams(max_tokens=40, ignore_eos=True, temperature=0.9, seed=2, logit_bias={13: -100.0})]
    llm = LLM()
    together = llm.generate(prompts, each)
    for prompt, p, out in zip(prompts, each, together):
        assert out.token_ids == llm.generate([prompt], p)[0].token_ids
    assert 13 not in together[2].token_ids


def test_processing_parameters_are_checked():
    assert not processes(SamplingParams(min_p=0.3))  # greedy: min_p never drops the most likely token
    assert processes(SamplingParams(temperature=1.0, min_p=0.3))
    for bad, match in [({"presence_penalty": 2.5}, "presence_penalty must be in"),
                       ({"repetition_penalty": 0.0}, "repetition_penalty must be in \\[0.01, 100\\]"),
                       ({"min_p": 1.5}, "min_p must be in"),
                       ({"logit_bias": {5: 101.0}}, "logit_bias values must be in"),
                       ({"logit_bias": {-1: 1.0}}, "logit_bias keys must be token ids"),
                       ({"logit_bias": ((4, 1.0), (4, 2.0))}, "names a token twice")]:
        with pytest.raises(InvalidSamplingParamsError, match=match):
            SamplingParams(**bad)
    llm = LLM(draft=None)
    with pytest.raises(InvalidSamplingParamsError, match="outside the vocabulary"):
        llm.generate([[3, 4, 5]], SamplingParams(logit_bias={10 ** 7: 1.0}))


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
def test_min_tokens_holds_back_stop_ids_and_stop_strings():
    """The first min_tokens tokens are never a stop id (nor EOS), and stop strings count only in the text after them;
    speculative output equals plain output."""
    plain, spec = LLM(draft=None, speculative=False), LLM()
    prompt = "def parse(line):\n"
    free = spec.generate([prompt], SamplingParams(max_tokens=40, ignore_eos=True))[0].token_ids
    stop_id = free[2]
    assert spec.generate([prompt], SamplingParams(max_tokens=40, stop_token_ids=[stop_id]))[0].token_ids == free[:3]
    for temperature in (0.0, 0.9):
        params = SamplingParams(max_tokens=40, stop_token_ids=[stop_id], min_tokens=12, temperature=temperature,
                                seed=4)
        out = spec.generate([prompt], params)[0]
        assert out.token_ids == plain.generate([prompt], params)[0].token_ids
        assert len(out.token_ids) >= 12 and stop_id not in out.token_ids[:12]
    early = spec.generate([prompt], SamplingParams(max_tokens=60, stop="\n"))[0]
    late = spec.generate([prompt], SamplingParams(max_tokens=60, stop="\n", min_tokens=len(early.token_ids) + 2))[0]
    assert "\n" not in early.text and early.finish_reason == "stop"
    assert late.text.startswith(early.text + "\n") and len(late.token_ids) >= len(early.token_ids) + 2
    with pytest.raises(InvalidSamplingParamsError, match="min_tokens must be an integer from 0 to max_tokens"):
        SamplingParams(max_tokens=4, min_tokens=5)


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
def test_bad_words_never_appear():
    """bad_words (vLLM's rule: each word's tokens, as written and after a space, never all generated in a row); the
    same tokens with speculation on and off, matched on the device or on the host."""
    from sparkdec.spec import processed

    plain, spec = LLM(draft=None, speculative=False), LLM()
    prompts = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    "]
    base = spec.generate(prompts, SamplingParams(max_tokens=60))
    assert "Parse a" in base[0].text and " line" in base[0].text and "argparse" in base[1].text
    for temperature in (0.0, 0.8):
        params = SamplingParams(max_tokens=60, temperature=temperature, seed=6, bad_words=["line", "argparse", "Parse a"])
        outs = spec.generate(prompts, params)
        assert [o.token_ids for o in outs] == [o.token_ids for o in plain.generate(prompts, params)]
        processed.DEVICE_PROCESSING = False  # the reference: the words matched on the host, after the read
        try:
            assert [o.token_ids for o in spec.generate(prompts, params)] == [o.token_ids for o in outs]
        finally:
            processed.DEVICE_PROCESSING = True
        words = spec.engine.bad_word_ids(params.bad_words)
        assert any(len(w) > 1 for w in words)  # a word of several tokens is banned as a run
        for o in outs:
            ids = o.token_ids
            assert not any(ids[k:k + len(w)] == list(w) for w in words for k in range(len(ids))), o.text
    with pytest.raises(InvalidSamplingParamsError, match="bad_words must be non-empty strings"):
        SamplingParams(bad_words=[" "])


def test_banned_rows_follow_each_rows_history():
    from sparkdec.penalties import banned_rows

    words = ((9,), (7, 9), (5, 7, 3))
    rows = banned_rows(words, [5, 7] + [7, 9], 2, 3)  # output [5, 7], drafts [7, 9]: rows after [5, 7], +7, +7 9
    assert [sorted(r) for r in rows] == [[3, 9, 9], [9, 9], [9]]
    x = processed_rows(torch.zeros(3, 12), SamplingParams(), [], [5, 7], [7, 9], bad_words=words)
    assert [torch.isinf(r).nonzero().flatten().tolist() for r in x] == [[3, 9], [9], [9]]
    # the drafts on the device (row_processing matches the words there), a step ahead, and nothing before the rows
    assert torch.equal(processed_rows(torch.zeros(3, 12), SamplingParams(), [], [5, 7], torch.tensor([7, 9]),
                                      bad_words=words), x)
    ahead = processed_rows(torch.zeros(1, 12), SamplingParams(), [], [5], torch.tensor([7]), bad_words=words, first=1)
    assert torch.equal(ahead, processed_rows(torch.zeros(1, 12), SamplingParams(), [], [5, 7], [], bad_words=words))
    assert torch.equal(processed_rows(torch.zeros(2, 12), SamplingParams(), [], [], torch.tensor([5]),
                                      bad_words=words), processed_rows(torch.zeros(2, 12), SamplingParams(), [], [], [5],
                                                                       bad_words=words))


def test_the_device_history_counts_what_a_fresh_count_gives():
    """penalties.History keeps a sequence's counts on the device as its output grows (and counts again when the
    output is not what it counted): rows processed with it equal rows processed from the lists."""
    from sparkdec.penalties import History

    gen = torch.Generator().manual_seed(3)
    params = SamplingParams(repetition_penalty=1.3, frequency_penalty=0.4, presence_penalty=0.2)
    prompt, output, history = [1, 4, 4, 9], [], History()
    for step in range(24):
        output = output + torch.randint(0, 30, (1 + step % 3,), generator=gen).tolist()
        if step == 15:
            output = output[:4] + [29]  # not the output it counted: counted again
        logits = torch.randn(3, 30, generator=gen) * 3
        drafts = torch.randint(0, 30, (2,), generator=gen).tolist()
        assert torch.equal(processed_rows(logits, params, prompt, output, drafts, history=history),
                           processed_rows(logits, params, prompt, output, drafts)), step


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
def test_allowed_token_ids_limit_the_output_and_speculation_changes_nothing():
    """allowed_token_ids (vLLM's): every output token is one of them; speculative output equals plain output."""
    plain, spec = LLM(draft=None, speculative=False), LLM()
    prompt = "import os\nimport sys\n\n\ndef main(argv):\n    "
    free = plain.generate([prompt], SamplingParams(max_tokens=48, ignore_eos=True))[0].token_ids
    allowed = sorted(set(free[::2]))  # (some of the tokens it would use: the output must change)
    for temperature in (0.0, 0.9):
        params = SamplingParams(max_tokens=48, ignore_eos=True, allowed_token_ids=allowed, temperature=temperature,
                                seed=2)
        out = spec.generate([prompt], params)[0].token_ids
        assert out == plain.generate([prompt], params)[0].token_ids and set(out) <= set(allowed)
    assert set(free) - set(allowed)
    with pytest.raises(InvalidSamplingParamsError, match="allowed_token_ids must be a non-empty list"):
        SamplingParams(allowed_token_ids=[])
    with pytest.raises(InvalidSamplingParamsError, match="allowed_token_ids names token ids"):
        plain.generate([prompt], SamplingParams(allowed_token_ids=[10 ** 7]))


def test_device_processing_gives_the_rows_and_dead_rows_of_the_read_path():
    """spec/processed.device_processing (drafts as a device tensor, states read with the round) against
    process_spans + read_rows (drafts from the host): the same processed rows, the same dead rows (a NaN row: not
    the request's doing)."""
    from types import SimpleNamespace

    from sparkdec.spec.processed import dead_of, device_processing, process_spans, read_rows

    torch.manual_seed(0)
    vocab, drafts = 50, [7, 3, 7]
    params = SamplingParams(repetition_penalty=1.3, presence_penalty=0.4, min_tokens=6, logit_bias={2: 1.5})

    def seq():
        return SimpleNamespace(params=params, prompt_ids=[1, 3, 5], output_ids=[4, 7], guide=None, bad_words=(),
                               history=None, eos_ids=(0,))
    logits = torch.randn(6, vocab)
    logits[4, 9] = float("nan")  # the second sequence's row 2
    a, b = seq(), seq()
    spans = [(a, 0, 2, 0), (b, 2, 4, 1)]
    host = [drafts[:1], drafts]
    rows = process_spans(spans, logits, host)
    _, dead = read_rows(spans, rows, lambda s: False)
    dev = [(a, 0, 2, torch.tensor(drafts[:1]), 0), (b, 2, 4, torch.tensor(drafts), 0)]
    at, out, states = device_processing(dev)(logits)
    assert at == list(range(6)) and torch.equal(out[0:2], rows[id(a)])
    assert torch.equal(out[2:6].nan_to_num(), rows[id(b)].nan_to_num())
    assert dead_of(dev, states.tolist()) == dead == {id(b): (2, False)}
    # a step ahead (engine/lookahead.py): one row after the output and a token still on the device
    at, ahead, _ = device_processing([(seq(), 1, 1, torch.tensor([9]), 1)])(logits[:2])
    assert at == [1] and torch.equal(ahead, processed_rows(logits[1:2], params, [1, 3, 5], [4, 7, 9], [], None, (0,)))
    ahead = device_processing([(seq(), 0, 1, torch.tensor([9]), 1)])(logits[:1])[1]
    assert torch.equal(ahead, processed_rows(logits[:1], params, [1, 3, 5], [4, 7, 9], [], None, (0,)))
    assert not torch.equal(ahead, processed_rows(logits[:1], params, [1, 3, 5], [4, 7], [], None, (0,)))


def test_rows_processed_in_one_pass_equal_each_sequence_processed_alone():
    """row_processing.process_rows: sequences with different rules (penalties, bias, min_p, min_tokens,
    allowed_token_ids, bad words, a grammar's mask, none) and drafts (a list, a tensor, a step ahead) processed
    together give each one's rows bit for bit as processing it alone."""
    from sparkdec.penalties import row_span
    from sparkdec.row_processing import process_rows

    torch.manual_seed(1)
    vocab = 40
    allowed = torch.rand(3, vocab) > 0.3
    cases = [(SamplingParams(repetition_penalty=1.4, logit_bias={3: 2.5}), [7, 9], dict()),
             (SamplingParams(), [], dict()),
             (SamplingParams(temperature=0.9, min_p=0.2, presence_penalty=0.7, min_tokens=9), torch.tensor([5, 5]),
              dict(stop_ids=(0, 2))),
             (SamplingParams(frequency_penalty=1.1, allowed_token_ids=[1, 4, 5, 9, 12]), [4], dict(first=1)),
             (SamplingParams(repetition_penalty=0.8), [11, 3], dict(allowed=allowed, bad_words=((3, 11), (6,))))]
    spans, alone = [], []
    for params, drafts, extra in cases:
        n = 1 if extra.get("first") else 3
        logits = torch.randn(n, vocab)
        args = (params, [1, 2, 3, 11], [3, 4, 5], drafts, extra.get("allowed"), extra.get("stop_ids", ()),
                extra.get("bad_words", ()), None, extra.get("first", 0))
        alone.append(processed_rows(logits, *args))
        spans.append((logits, row_span(logits.shape, *args, device=logits.device)))
    together = process_rows(torch.cat([x for x, _ in spans]), [s for _, s in spans])
    assert torch.equal(together, torch.cat(alone))
    assert torch.isneginf(together[6:9][:, [0, 2]]).all() and torch.isneginf(together[10:13, 6]).all()
    assert set(torch.isfinite(together[9]).nonzero().view(-1).tolist()) == {1, 4, 5, 9, 12}
    assert torch.isfinite(together[3:6]).all() and not torch.equal(together[0:3], spans[0][0])


def test_floats_reach_the_device_rounded_as_torch_rounds_them():
    """staging.floats_to_device (processing's per-row parameters, copied without a pageable copy on CUDA)."""
    from sparkdec.staging import floats_to_device

    values = [1.1, 0.3, 1e-8, 2.5, -100.0, 1 / 3]
    assert torch.equal(floats_to_device(values, "cpu"), torch.tensor(values, dtype=torch.float32))
