"""The shipped trained pair: lossless speculation with real acceptance, and a guard on the slot convention."""
from __future__ import annotations


import pytest
import torch

from sparkdec import LLM, SamplingParams
from sparkdec.engine.llm_engine import DEFAULT_PAIR

pytestmark = pytest.mark.skipif(not (DEFAULT_PAIR / "draft" / "config.json").is_file(), reason="no shipped pair")

PROMPTS = [
    "def parse(line):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Config:\n    def __init__(self, path):\n        ",
    "    for key, value in sorted(items.items()):\n",
    "The standard library provides",
    "This module defines functions for",
]


# coupled minus argmax mean acceptance length at T = 1 that the test asks for (measured 1.46 -> 1.92 on these prompts)
MARGIN = 0.25


@pytest.fixture(scope="module")
def plain():
    return LLM(draft=None, speculative=False)


@pytest.fixture(scope="module")
def spec():
    return LLM()


def test_greedy_parity_256_tokens_alone_and_batched(plain, spec):
    params = SamplingParams(max_tokens=256, ignore_eos=True)
    ref = plain.generate(PROMPTS, params)
    batched = spec.generate(PROMPTS, params)
    alone = [spec.generate([p], params)[0] for p in PROMPTS[:2]]
    assert [o.token_ids for o in batched] == [o.token_ids for o in ref]
    assert [o.token_ids for o in alone] == [o.token_ids for o in ref[:2]]
    assert [o.text for o in batched] == [o.text for o in ref]
    als = [o.stats["mean_acceptance_length"] for o in batched]
    assert sum(als) / len(als) >= 2.0, als


def test_exact_sampling_parity_with_real_acceptance(plain, spec):
    params = [SamplingParams(max_tokens=256, ignore_eos=True, temperature=0.3, seed=11 + i) for i in range(len(PROMPTS))]
    ref = plain.generate(PROMPTS, params)
    out = spec.generate(PROMPTS, params)
    assert [o.token_ids for o in out] == [o.token_ids for o in ref]
    als = [o.stats["mean_acceptance_length"] for o in out]
    assert sum(als) / len(als) >= 2.0, als


def test_coupled_drafts_raise_sampled_acceptance_and_stay_exact(plain, spec, monkeypatch):
    """Exact-sampled drafts race with the noise the target draws with (spec/coupling.py): plain sampled decoding's
    tokens either way, and more drafts accepted than with the drafter's argmax."""
    from sparkdec.spec import coupling

    params = [SamplingParams(max_tokens=96, ignore_eos=True, temperature=1.0, seed=11 + i) for i in range(len(PROMPTS))]
    ref = [o.token_ids for o in plain.generate(PROMPTS, params)]
    als = {}
    for on in (False, True):
        monkeypatch.setattr(coupling, "COUPLED", on)
        out = spec.generate(PROMPTS, params)
        assert [o.token_ids for o in out] == ref
        als[on] = sum(o.stats["mean_acceptance_length"] for o in out) / len(out)
    assert als[True] > als[False] + MARGIN, als


def test_tight_filters_keep_argmax_drafts():
    """The race ignores top-k and top-p: a request that filters hard drafts the argmax (coupled drafts accepted
    fewer there: spec/coupling.py)."""
    from sparkdec.spec.coupling import couples

    assert couples(SamplingParams(temperature=0.8)) and couples(SamplingParams(temperature=1, top_k=50, top_p=0.95))
    assert not couples(SamplingParams(temperature=0.8, top_k=3))
    assert not couples(SamplingParams(temperature=0.8, top_p=0.5))


def test_slot_convention_guard(spec, monkeypatch):
    """Slot k predicts position s+k+1. Reading slot k's draft from block row k+1 (the DFlash convention) must
    collapse acceptance, and the correct engine must stay far above it."""
    from sparkdec.models.dspark import DSparkDrafter

    params = SamplingParams(max_tokens=96, ignore_eos=True)
    good = spec.generate(PROMPTS[:3], params)
    good_al = sum(o.stats["mean_acceptance_length"] for o in good) / 3
    original = DSparkDrafter.markov_chain

    def shifted(self, h, anchors, pick, greedy=False, coupling=None):
        return original(self, torch.cat([h[:, 1:], h[:, -1:]], dim=1), anchors, pick, greedy, coupling)

    monkeypatch.setattr(DSparkDrafter, "markov_chain", shifted)
    bad = LLM(cuda_graphs=False).generate(PROMPTS[:3], params)
    bad_al = sum(o.stats["mean_acceptance_length"] for o in bad) / 3
    assert [o.token_ids for o in bad] == [o.token_ids for o in good]  # still lossless, only slower
    assert good_al >= 2.0 and bad_al < good_al - 0.8, (good_al, bad_al)


def test_cli_generate_runs_on_the_shipped_pair():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "sparkdec", "generate", "def parse(line):", "--max-tokens", "24", "--timing"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "AL" in res.stderr and "round anatomy" in res.stderr and res.stdout.strip()
    import json

    res = subprocess.run([sys.executable, "-m", "sparkdec", "generate", "Give me a user record.", "--chat", "--json",
                          "--max-tokens", "80"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and isinstance(json.loads(res.stdout), dict), res.stdout + res.stderr
    res = subprocess.run([sys.executable, "-m", "sparkdec", "generate", "import os\n", "--stop", "os.path.expand",
                          "--max-tokens", "80"], capture_output=True, text=True, timeout=600)
    # (the stop spans tokens: what may still become it is held back, never printed and then cut)
    assert res.returncode == 0 and res.stdout.rstrip().endswith("os.path.join(os.path.join("), res.stdout


def test_stop_strings_kept_special_tokens_shown_and_speculation_changes_neither(plain, spec):
    """include_stop_str_in_output keeps the stop string that ended the output; skip_special_tokens=False writes
    special tokens into the text, but not the EOS that ended it (vLLM keeps a stop token only when it is not special)
    unless include_stop_str_in_output; speculative text equals plain text in each case."""
    prompt = "import os\n"  # (the shipped model ends this one with EOS well within 200 tokens)
    base = plain.generate([prompt], SamplingParams(max_tokens=200))[0]
    eos = plain.engine.tokenizer.decode([base.token_ids[-1]], False)
    assert base.finish_reason == "stop" and base.token_ids[-1] in plain.engine.tokenizer.eos_token_ids and eos
    cases = [(dict(skip_special_tokens=False), base.text),
             (dict(skip_special_tokens=False, include_stop_str_in_output=True), base.text + eos),
             (dict(stop=["expand"]), base.text[:base.text.index("expand")]),
             (dict(stop=["expand", "os.path.expand"], include_stop_str_in_output=True),
              base.text[:base.text.index("os.path.expand") + len("os.path.expand")])]
    for kw, text in cases:
        outs = [llm.generate([prompt], SamplingParams(max_tokens=200, **kw))[0] for llm in (plain, spec)]
        assert [o.text for o in outs] == [text, text], kw
