"""Host time of a round's grammar walk (the masks of guided verify rows, spec/processed.grammar_masks): B JSON-schema
requests, each with 7 drafts (8 rows), walked one request at a time (Matcher.allowed) and together
(grammar_matcher.allowed_rows: xgrammar's batch matcher on its threads); the masks checked equal; and the check that
replaces them for greedy rows (Matcher.allows: the 8 tokens, drafts accepted, each accepted on trial), and for top-k
draws (each row's 20 kept ids checked: every check passing, the most it costs). The vocabulary:
the shipped pair's (8192), or a synthetic one of a given size (151936: Qwen3's).
Usage: python scripts/grammar_walk_cost.py OUT.json [tiny|VOCAB_SIZE]"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

import torch

from sparkdec import LLM, Guided, SamplingParams
from sparkdec import grammar_matcher
from sparkdec.bench import provenance

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24}, "line": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "line", "tags"]}
TEXT = '{"name": "parse_line", "line": 1234, "tags": ["io", "text"]}'
TOP_K = 20  # (Qwen3's recommended top-k)


def timed(call, reps: int = 20) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        call()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def synthetic(vocab: int):
    """(a matcher factory, TEXT's token ids) over a vocabulary of Qwen3's size: the 256 bytes, then distinct pieces
    of 2-6 printable characters (seeded), with JSON's own characters among them, as a BPE vocabulary has."""
    import random

    import xgrammar as xgr

    rng, pieces, seen = random.Random(0), [bytes([i]) for i in range(256)], set()
    letters = b'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-":,{}[]'
    while len(pieces) < vocab:
        p = bytes(rng.choice(letters) for _ in range(rng.randint(2, 6)))
        if p not in seen:
            seen.add(p)
            pieces.append(p)
    info = xgr.TokenizerInfo([p.decode("latin-1") for p in pieces], xgr.VocabType.RAW, vocab_size=vocab,
                             stop_token_ids=[0])
    compiled = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA), any_whitespace=False)
    ids = [b for b in TEXT.encode()]  # (one byte a token)
    return lambda: grammar_matcher.Matcher(compiled, (0,), vocab), ids


def main(out_path: str, vocab: str = "tiny") -> None:
    if vocab == "tiny":
        eng = LLM(speculative=False).engine
        ids, size = eng.tokenizer.encode(TEXT), eng.target_cfg.vocab_size
        guided = SamplingParams(guided=Guided(json=SCHEMA, any_whitespace=False))
        make = lambda: eng.guide_for([1, 2], guided)  # noqa: E731
    else:
        size = int(vocab)
        make, ids = synthetic(size)
    results = {}
    for b in (1, 4, 16):
        asks, rounds = [], []
        for i in range(b):  # each request at another point of the object
            m = make()
            at = (3 * i) % (len(ids) - 8)
            for t in ids[:at]:
                m.accept(t)
            asks.append((m, ids[at:at + 7], 8))
            rounds.append((m, ids[at:at + 7], ids[at:at + 8]))  # (the text's own tokens: each check passes)
        alone = [m.allowed(d, n, "cpu") for m, d, n in asks]
        together = grammar_matcher.allowed_rows(asks, "cpu", together=True)
        same = all(torch.equal(a, c) for a, c in zip(alone, together))
        assert all(m.allows(d, t) for m, d, t in rounds)
        # a top-k draw's check (spec/processed.FILTERED_CHECKED): each row's token and TOP_K - 1 other allowed ids
        kept = [[[t[k]] + [i for i in mask[k].nonzero().flatten().tolist() if i != t[k]][:TOP_K - 1]
                 for k in range(len(t))] for (m, d, t), mask in zip(rounds, alone)]
        assert all(m.allows(d, t, kk) for (m, d, t), kk in zip(rounds, kept))
        results[f"B{b}"] = {"one_at_a_time_ms": timed(lambda: [m.allowed(d, n, "cpu") for m, d, n in asks]),
                            "together_ms": timed(lambda: grammar_matcher.allowed_rows(asks, "cpu", together=True)),
                            "same_masks": same, "checked_ms": timed(lambda: [m.allows(d, t) for m, d, t in rounds]),
                            f"checked_top{TOP_K}_ms": timed(lambda: [m.allows(d, t, kk) for (m, d, t), kk
                                                                      in zip(rounds, kept)])}
        r = results[f"B{b}"]
        print(f"B={b}: one at a time {r['one_at_a_time_ms']:.2f} ms, together {r['together_ms']:.2f} ms, same masks "
              f"{same}; checked {r['checked_ms']:.3f} ms, top-{TOP_K} kept sets checked "
              f"{r[f'checked_top{TOP_K}_ms']:.3f} ms", flush=True)
    record = {"device": f"CPU ({platform.processor() or 'x86_64'}), {os.cpu_count()} cores",
              "date": time.strftime("%Y-%m-%d"),
              "commit": provenance.commit(), "command": " ".join(["python"] + sys.argv),
              "config": {"vocabulary": "shipped tiny pair's" if vocab == "tiny" else "synthetic (256 bytes + "
                         "random 2-6 character pieces)", "vocab": size, "threads": "xgrammar's default (half the cores)",
                         "rows_per_request": 8, "top_k": TOP_K,
                         "schema": SCHEMA, "reps": 20, "statistic": "median"},
              "results": results}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
