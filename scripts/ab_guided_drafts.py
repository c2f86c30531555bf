"""A/B of drafts that follow their request's rules, on the shipped pair: suite "guided" (spec/round.py GUIDED_DRAFTS:
JSON-schema, tool-call, regex and choice requests), "forced" (FORCED_DRAFTS, the text the grammar forces drafted, on
the same requests with GUIDED_DRAFTS off, as on CUDA), "ondevice" (spec/processed.py GUIDED_ON_DEVICE: the grammar's
masks applied before the round's one read, rounds chained; the same requests, GUIDED_DRAFTS and GUIDED_CHECKED off),
"checked" (GUIDED_CHECKED: greedy rows unmasked, their tokens checked after the read; the same requests, GUIDED_DRAFTS
off; the share of checks the grammar refused, each then masked after the read, counted), "topk" (FILTERED_CHECKED:
the same requests sampled as Qwen3 recommends, T 0.7, top-k 20, top-p 0.8, each row's kept ids checked) or "processed"
(PROCESSED_DRAFTS: penalties, logit_bias, min_p, min_tokens). Tokens per round and tokens/s with the switch off and
on, the tokens checked equal both ways.
Usage: python scripts/ab_guided_drafts.py OUT.json [device] [guided|forced|ondevice|checked|topk|processed]"""
from __future__ import annotations

import json
import platform
import sys
import time

import torch

from sparkdec import LLM, Guided, SamplingParams
from sparkdec.bench import provenance
from sparkdec.spec import processed
from sparkdec.spec import round as spec_round

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                           "line": {"type": "integer", "minimum": 0, "maximum": 9999},
                                           "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
          "required": ["name", "line", "tags"]}
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
GUIDES = {"json_schema": Guided(json=SCHEMA, any_whitespace=False),
          "tool_call": Guided(tool_calls=(("get_weather", WEATHER),)),
          "regex": Guided(regex=r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"),
          "choice": Guided(choice=("positive", "negative", "neutral"))}
PROCESSED = {"repetition_1.3": dict(repetition_penalty=1.3), "repetition_1.05": dict(repetition_penalty=1.05),
             "presence_frequency": dict(presence_penalty=0.8, frequency_penalty=0.5),
             "bias_min_tokens": dict(logit_bias={13: -100.0, 198: 1.0}, min_tokens=60),
             "sampled_repetition_min_p": dict(temperature=0.8, seed=3, repetition_penalty=1.2, min_p=0.05)}
CODE = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ", "class Stack:\n",
        "for key, value in items:\n"]
QUESTIONS = ["Describe the function parse in JSON.", "What is the weather in Paris?", "When was Python released?",
             "Is this review positive? 'Great library, works well.'"]


def run(llm, prompts, params) -> tuple[list, float]:
    t = time.perf_counter()
    outs = llm.generate(prompts, params)
    return outs, time.perf_counter() - t


def main(out_path: str, device: str = "cpu", suite: str = "guided") -> None:
    llm = LLM(device=device, spec_bypass=False)  # (every round speculates: tokens per round)
    tok = llm.engine.tokenizer
    if suite in ("forced", "ondevice", "checked", "topk"):
        spec_round.GUIDED_DRAFTS = False
    if suite == "ondevice":
        processed.GUIDED_CHECKED = False
    checks = []  # each round's failed checks, and how many sequences it checked
    failed_checks = processed.failed_checks
    processed.failed_checks = lambda spans, *a: checks.append(  # noqa: E731
        (len(failed_checks(spans, *a)), sum(processed.checked(s) for s, *_ in spans))) or failed_checks(spans, *a)
    if suite in ("guided", "forced", "ondevice", "checked", "topk"):
        prompts = [tok.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]
        drawn = dict(temperature=0.7, top_k=20, top_p=0.8, seed=11) if suite == "topk" else {}
        cases = {name: SamplingParams(max_tokens=200, guided=g, **drawn) for name, g in GUIDES.items()}
    else:
        prompts = CODE
        cases = {name: SamplingParams(max_tokens=200, ignore_eos=True, **kw) for name, kw in PROCESSED.items()}
    switch = {"guided": "GUIDED_DRAFTS", "forced": "FORCED_DRAFTS", "ondevice": "GUIDED_ON_DEVICE",
              "checked": "GUIDED_CHECKED", "topk": "FILTERED_CHECKED"}.get(suite, "PROCESSED_DRAFTS")
    module = processed if suite in ("ondevice", "checked", "topk") else spec_round
    results = {}
    for name, params in cases.items():
        row = {}
        for on in (False, True, False, True):  # interleaved, the second pair kept (the first warms up)
            setattr(module, switch, on)
            checks.clear()
            outs, secs = run(llm, prompts, params)
            rounds = sum(o.stats["rounds"] for o in outs)
            tokens = sum(len(o.token_ids) for o in outs)
            row["on" if on else "off"] = {"tokens": tokens, "rounds": rounds, "tokens_per_round": tokens / rounds,
                                          "tokens_per_s": tokens / secs, "token_ids": [o.token_ids for o in outs],
                                          "checks": sum(n for _, n in checks), "failed_checks": sum(f for f, _ in checks)}
        same = row["on"].pop("token_ids") == row["off"].pop("token_ids")
        results[name] = {**row, "same_tokens": same}
        print(f"{name}: tokens/round {row['off']['tokens_per_round']:.2f} -> {row['on']['tokens_per_round']:.2f}, "
              f"tokens/s {row['off']['tokens_per_s']:.0f} -> {row['on']['tokens_per_s']:.0f}, same tokens {same}; checks "
              f"failed {row['on']['failed_checks']}/{row['on']['checks']}")
    record = {"device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'x86_64'})",
              "date": time.strftime("%Y-%m-%d"), "commit": provenance.commit(), "command": " ".join(["python"] + sys.argv),
              "config": {"pair": "shipped tiny", "max_tokens": 200, "suite": suite, "switch": f"{module.__name__} {switch}",
                         "prompts": prompts, "cases": {n: repr(p) for n, p in cases.items()}},
              "results": results}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
