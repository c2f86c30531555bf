"""Log-probabilities of output tokens: equal to Hugging Face's log-softmax, and unchanged by speculation."""
from __future__ import annotations

import pytest
import torch

from sparkdec import LLM, SamplingParams
from sparkdec.engine.llm_engine import DEFAULT_PAIR
from sparkdec.errors import InvalidSamplingParamsError

PROMPTS = [[1, 5, 9, 33, 2, 7, 100, 4], [17, 3, 250, 250, 11, 90, 8, 8, 8, 1, 2, 3, 45, 6, 77, 120, 5]]
SHIPPED = (DEFAULT_PAIR / "draft" / "config.json").is_file()


def _reference(path, prompt: list[int], output: list[int]) -> torch.Tensor:
    """HF transformers' log-softmax at the rows that chose output: [len(output), V]."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + output])).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits, dim=-1)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_logprobs_match_transformers(targets, temperature):
    path = targets["untied_gqa4_odd_vocab"]
    llm = LLM(model=str(path), device="cpu")
    params = SamplingParams(max_tokens=24, ignore_eos=True, temperature=temperature, seed=3, logprobs=4)
    for prompt, out in zip(PROMPTS, llm.generate(PROMPTS, params)):
        ref = _reference(path, prompt, out.token_ids)
        assert len(out.logprobs) == len(out.token_ids) == 24
        assert [t for t, _, _ in out.logprobs] == out.token_ids
        chosen = torch.tensor([lp for _, lp, _ in out.logprobs])
        torch.testing.assert_close(chosen, ref.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0],
                                   atol=1e-4, rtol=0)
        for k, (_, _, top) in enumerate(out.logprobs):
            ids = [i for i, _ in top]
            assert len(ids) == 4 and [v for _, v in top] == sorted((v for _, v in top), reverse=True)
            torch.testing.assert_close(torch.tensor([v for _, v in top]), ref[k].topk(4).values, atol=1e-4, rtol=0)
            if temperature == 0.0:  # greedy chose the most likely token
                assert out.token_ids[k] == ids[0]


def test_prompt_logprobs_match_transformers_in_chunks(targets):
    path = targets["untied_mha"]
    params = SamplingParams(max_tokens=4, ignore_eos=True, prompt_logprobs=3)
    whole = LLM(model=str(path), device="cpu").generate(PROMPTS, params)
    chunked = LLM(model=str(path), device="cpu", max_num_seqs=2, max_batched_tokens=5).generate(PROMPTS, params)
    for prompt, out, out5 in zip(PROMPTS, whole, chunked):
        assert out.prompt_logprobs[0] == (prompt[0], None, ()) and out.logprobs is None
        assert [t for t, _, _ in out.prompt_logprobs] == prompt
        ref = _reference(path, prompt[:1], prompt[1:])  # rows 0 .. n-2 scoring tokens 1 .. n-1
        got = torch.tensor([lp for _, lp, _ in out.prompt_logprobs[1:]])
        torch.testing.assert_close(got, ref.gather(1, torch.tensor(prompt[1:])[:, None])[:, 0], atol=1e-4, rtol=0)
        top = torch.tensor([[v for _, v in t] for _, _, t in out.prompt_logprobs[1:]])
        torch.testing.assert_close(top, ref.topk(3, dim=-1).values, atol=1e-4, rtol=0)
        assert out5.prompt_logprobs == out.prompt_logprobs and out5.token_ids == out.token_ids  # 5-token chunks


@pytest.mark.skipif(not SHIPPED, reason="no shipped pair")
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_speculation_leaves_logprobs_unchanged(temperature):
    prompts = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    "]
    params = SamplingParams(max_tokens=48, ignore_eos=True, temperature=temperature, seed=11, logprobs=2)
    plain = LLM(draft=None, speculative=False).generate(prompts, params)
    spec = LLM().generate(prompts, params)
    for a, b in zip(plain, spec):
        assert b.stats["num_accepted_tokens"] > 0  # drafts were accepted, so verify rows gave some logprobs
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs  # the very same floats


def test_logprobs_out_of_range_are_refused():
    with pytest.raises(InvalidSamplingParamsError, match="logprobs must be an integer from 0 to 20"):
        SamplingParams(logprobs=21)
    assert LLM(draft=None).generate([[3, 4, 5]], SamplingParams(max_tokens=2))[0].logprobs is None
