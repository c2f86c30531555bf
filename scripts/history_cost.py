"""Cost of a processed round's penalty history at Qwen3's vocabulary with an 8k prompt and a 4k output: the history
built from the token lists (what every round paid before penalties.History) against the kept one, and whole
processed_rows for 8 verify rows both ways (same rows, checked; on a CPU the elementwise work on [8, V] dominates it).

usage: python scripts/history_cost.py [OUT.json] [cpu|cuda]"""
from __future__ import annotations

import json
import sys
import time

import torch

from sparkdec.bench import provenance
from sparkdec.penalties import History, processed_rows
from sparkdec.sampling import SamplingParams

VOCAB, PROMPT, OUTPUT, ROWS, REPS = 151936, 8192, 4096, 8, 20


def ms(fn) -> float:
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(REPS):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / REPS * 1e3


def main(out: str | None, device: str) -> dict:
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, VOCAB, (PROMPT,), generator=gen).tolist()
    output = torch.randint(0, VOCAB, (OUTPUT,), generator=gen).tolist()
    logits = torch.randn(ROWS, VOCAB, generator=gen).to(device)
    params = SamplingParams(repetition_penalty=1.1, presence_penalty=0.3)
    drafts, history = list(range(ROWS - 1)), History()
    assert torch.equal(processed_rows(logits, params, prompt, output, drafts),
                       processed_rows(logits, params, prompt, output, drafts, history=history))
    def fresh() -> None:  # (what each round did before: prompt mask and output counts from the lists)
        h = History()
        h.prompt_seen(prompt, VOCAB, device), h.output_counts(output, VOCAB, device)

    def kept() -> None:
        history.prompt_seen(prompt, VOCAB, device), history.output_counts(output, VOCAB, device)

    res = {"device": device, "history_from_lists_ms": ms(fresh), "history_kept_ms": ms(kept), "vocab": VOCAB, "prompt_tokens": PROMPT, "output_tokens": OUTPUT, "rows": ROWS,
           "processed_rows_from_lists_ms": ms(lambda: processed_rows(logits, params, prompt, output, drafts)),
           "processed_rows_with_history_ms": ms(
               lambda: processed_rows(logits, params, prompt, output, drafts, history=history)),
           "prompt_list_to_tensor_ms": ms(lambda: torch.tensor(prompt, device=device)),
           "output_list_to_tensor_ms": ms(lambda: torch.tensor(output, device=device)),
           "date": time.strftime("%Y-%m-%d"), "commit": provenance.commit(),
           "command": " ".join(["python"] + sys.argv)}
    print(json.dumps(res, indent=1))
    if out:
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2] if len(sys.argv) > 2 else "cpu")
