"""Operations a round's logit processing issues (each a kernel launch on CUDA, views aside), for S sequences of 8
verify rows with repetition + presence penalties and a logit_bias: all in one pass (row_processing.process_rows, what
the engine does on CUDA) against one pass per sequence (what it did before session 43, and does on a CPU), counted
with torch.profiler on this machine's CPU.

usage: python scripts/processing_ops.py OUT.json
"""
from __future__ import annotations

import json
import sys
import time
from types import SimpleNamespace

import torch
from torch.profiler import ProfilerActivity, profile

from sparkdec.bench import provenance
from sparkdec.sampling import SamplingParams
from sparkdec import row_processing
from sparkdec.spec import processed
from sparkdec.spec.processed import device_processing

VOCAB, ROWS = 151936, 8
PARAMS = SamplingParams(repetition_penalty=1.1, presence_penalty=0.3, logit_bias={13: 1.0})


def top_level_ops(fn) -> int:
    """aten operations fn issues, not counting those inside others."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    inside = {id(c) for e in events for c in e.cpu_children}
    return sum(1 for e in events if id(e) not in inside)


def main(path: str) -> None:
    results = []
    for s in (1, 4, 16):
        seqs = [SimpleNamespace(params=PARAMS, prompt_ids=list(range(100 + k, 400 + k)),
                                output_ids=list(range(50 + k, 90 + k)), guide=None, bad_words=(), history=None,
                                eos_ids=(2,)) for k in range(s)]
        drafts = torch.randint(0, VOCAB, (s, 7))
        spans = [(q, k * ROWS, ROWS, drafts[k], 0) for k, q in enumerate(seqs)]
        logits = torch.randn(s * ROWS, VOCAB)
        processed.process_batch = row_processing.process_rows  # (one pass, as on CUDA)
        together = device_processing(spans)
        apart = [device_processing([sp]) for sp in spans]
        together(logits), [p(logits) for p in apart]  # (each sequence's History built once, as in a run)
        t0 = time.perf_counter()
        x = together(logits)[1]
        t1 = time.perf_counter()
        y = torch.cat([p(logits)[1] for p in apart])
        t2 = time.perf_counter()
        assert torch.equal(x, y)
        row = {"sequences": s, "rows": s * ROWS, "ops_one_pass": top_level_ops(lambda: together(logits)),
               "ops_per_sequence_passes": top_level_ops(lambda: [p(logits) for p in apart]),
               "cpu_ms_one_pass": (t1 - t0) * 1e3, "cpu_ms_per_sequence_passes": (t2 - t1) * 1e3}
        results.append(row)
        print(row, flush=True)
    json.dump({"device": "CPU (this machine: 2 cores)", "date": time.strftime("%Y-%m-%d"),
               "commit": provenance.commit(), "command": "python scripts/processing_ops.py OUT.json",
               "config": {"vocab": VOCAB, "rows_per_sequence": ROWS, "params": repr(PARAMS)},
               "note": "ops: top-level aten operations (each a kernel launch on CUDA); the processed rows are checked "
                       "equal both ways; CPU ms are dominated by the elementwise work on [rows, V] on 2 cores",
               "results": results}, open(path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
