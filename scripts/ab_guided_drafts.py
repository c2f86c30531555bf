"""A/B of grammar-guided drafts (spec/round.py GUIDED_DRAFTS) on the shipped pair: mean acceptance length and
tokens/s for JSON-schema, tool-call, regex and choice requests, with the tokens checked equal both ways.
Usage: python scripts/ab_guided_drafts.py OUT.json [device]"""
from __future__ import annotations

import json
import platform
import sys
import time

import torch

from sparkdec import LLM, Guided, SamplingParams
from sparkdec.bench import provenance
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
QUESTIONS = ["Describe the function parse in JSON.", "What is the weather in Paris?", "When was Python released?",
             "Is this review positive? 'Great library, works well.'"]


def run(llm, prompts, params) -> tuple[list, float]:
    t = time.perf_counter()
    outs = llm.generate(prompts, params)
    return outs, time.perf_counter() - t


def main(out_path: str, device: str = "cpu") -> None:
    llm = LLM(device=device)
    tok = llm.engine.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]
    results = {}
    for name, guided in GUIDES.items():
        params = SamplingParams(max_tokens=200, guided=guided)
        row = {}
        for on in (False, True, False, True):  # interleaved, the second pair kept (the first warms up)
            spec_round.GUIDED_DRAFTS = on
            outs, secs = run(llm, prompts, params)
            rounds = sum(o.stats["rounds"] for o in outs)
            tokens = sum(len(o.token_ids) for o in outs)
            row["on" if on else "off"] = {"tokens": tokens, "rounds": rounds, "tokens_per_round": tokens / rounds,
                                          "tokens_per_s": tokens / secs, "token_ids": [o.token_ids for o in outs]}
        same = row["on"].pop("token_ids") == row["off"].pop("token_ids")
        results[name] = {**row, "same_tokens": same}
        print(f"{name}: tokens/round {row['off']['tokens_per_round']:.2f} -> {row['on']['tokens_per_round']:.2f}, "
              f"tokens/s {row['off']['tokens_per_s']:.0f} -> {row['on']['tokens_per_s']:.0f}, same tokens {same}")
    record = {"device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or 'x86_64'})",
              "date": time.strftime("%Y-%m-%d"), "commit": provenance.commit(), "command": " ".join(["python"] + sys.argv),
              "config": {"pair": "shipped tiny", "max_tokens": 200, "greedy": True, "prompts": QUESTIONS},
              "results": results}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
