"""The target runtime against Hugging Face transformers (float32, CPU): tokens and logits."""
from __future__ import annotations

import pytest
import torch

from sparkdec import LLM, SamplingParams
from sparkdec.engine.context import build_context

PROMPTS = [[1, 5, 9, 33, 2, 7, 100, 4], [17, 3, 250, 250, 11, 90, 8, 8, 8, 1, 2, 3, 45, 6, 77, 120, 5]]


def hf_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.mark.parametrize("name", ["tied_gqa2", "untied_gqa4_odd_vocab", "untied_mha"])
def test_greedy_tokens_match_transformers(targets, name):
    llm = LLM(model=str(targets[name]), device="cpu")
    hf = hf_model(targets[name])
    outs = llm.generate(PROMPTS, SamplingParams(max_tokens=64, ignore_eos=True))
    for prompt, out in zip(PROMPTS, outs):
        ref = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=64, min_new_tokens=64,
                          attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
        assert out.token_ids == ref[0, len(prompt):].tolist()


@pytest.mark.parametrize("name", ["tied_gqa2", "untied_gqa4_odd_vocab", "untied_mha"])
def test_final_logits_match_transformers(targets, name):
    llm = LLM(model=str(targets[name]), device="cpu")
    eng = llm.engine
    prompt = PROMPTS[1]
    eng.blocks.reserve(table := [], len(prompt))
    hidden, _ = eng.runner.target_forward([(table, prompt, list(range(len(prompt))))])
    ours = eng.runner.logits(hidden[-1:])[0]
    ref = hf_model(targets[name])(torch.tensor([prompt])).logits[0, -1]
    rel = (ours - ref).norm() / ref.norm()
    assert rel < 1e-4, rel


def test_context_causal_rows_see_their_prefix():
    ctx = build_context([([0, 1], [3, 4, 5], False), ([2], [0], False)], page_size=4, device="cpu")
    assert [g for s in ctx.segments for g in s.row_groups] == [(0, 1, 4), (1, 2, 5), (2, 3, 6), (3, 4, 1)]
    assert ctx.slot_mapping.tolist() == [3, 4, 5, 8]
