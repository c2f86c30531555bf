"""Evaluate a trained pair with sparkdec's own engine: held-out perplexity per category (HF transformers),
acceptance length per category at γ = 7 greedy with per-position acceptance, confidence calibration (ECE of the
survival product), the min_confidence sweep, drafter comparisons (data source, markov_rank 0) and the fraction
of held-out function-completion prompts whose completion parses with `ast`."""
from __future__ import annotations

import ast
import json
import random
import textwrap
import time
from pathlib import Path

import numpy as np

from sparkdec.train.corpus import CATEGORIES, iter_documents

SWEEP = (0.0, 0.3, 0.5, 0.7, 0.9)
ECE_BINS = 10


# ---------------------------------------------------------------- prompts

def heldout_prompts(corpus_dir, tokenizer, category: str, n: int, prompt_len: int, seed: int = 0) -> list[list[int]]:
    """n prefixes of prompt_len tokens from held-out documents, each starting at a line start, spread over
    documents round-robin (deterministic)."""
    rng = random.Random(f"{seed}-{category}")
    docs = [tokenizer.encode(r["text"]) for r in iter_documents(corpus_dir, "heldout", category)]
    newline = {i for i in range(tokenizer.vocab_size) if tokenizer.decode([i]).endswith("\n")}
    starts = []
    for ids in docs:
        cand = [0] + [i + 1 for i, t in enumerate(ids[:-prompt_len - 1]) if t in newline]
        cand = [c for c in cand if c + prompt_len < len(ids)]
        rng.shuffle(cand)
        starts.append(cand)
    prompts, d = [], 0
    while len(prompts) < n and any(starts):
        if starts[d % len(docs)]:
            s = starts[d % len(docs)].pop()
            prompts.append(docs[d % len(docs)][s:s + prompt_len])
        d += 1
    return prompts


def function_prompts(corpus_dir, n: int) -> list[dict]:
    """Held-out stdlib functions with a docstring and a body: prompt = header + docstring (dedented)."""
    found = []
    for rec in iter_documents(corpus_dir, "heldout", "code"):
        try:
            tree = ast.parse(rec["text"])
        except SyntaxError:
            continue
        lines = rec["text"].split("\n")
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or ast.get_docstring(node) is None:
                continue
            if len(node.body) < 2:
                continue
            doc_end = node.body[0].end_lineno
            prompt = textwrap.dedent("\n".join(lines[node.lineno - 1:doc_end]) + "\n")
            found.append({"source": rec["source"], "name": node.name, "line": node.lineno, "prompt": prompt})
    found.sort(key=lambda f: (hash_key(f["source"], f["line"]), f["source"], f["line"]))
    return found[:n]


def hash_key(source: str, line: int) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{source}:{line}".encode()).digest()[:8], "big")


def cut_function(prompt: str, completion: str) -> tuple[str, bool]:
    """The completion up to the end of the function body (first non-blank line at column 0); and whether the
    function ended before the generated text ran out."""
    out = []
    lines = completion.split("\n")
    for i, line in enumerate(lines):
        if line.strip() and not line[0].isspace():
            return "\n".join(out) + "\n", True
        out.append(line)
    # ran out: drop the (possibly unfinished) last line
    return "\n".join(out[:-1]) + "\n", False


def parses(prompt: str, body: str) -> bool:
    try:
        ast.parse(prompt + body)
        return True
    except (SyntaxError, ValueError):
        return False


# ---------------------------------------------------------------- acceptance statistics

def pooled_stats(outputs, gamma: int) -> dict:
    """AL, acceptance rate, per-position acceptance (engine definition and conditional) over all rounds."""
    rounds = [r for o in outputs for r in (o.rounds or [])]
    n = len(rounds)
    acc = [r["num_accepted"] for r in rounds]
    ver = [r["num_verified"] for r in rounds]
    accepted_at = [sum(1 for a in acc if a > j) for j in range(gamma)]
    verified_at = [sum(1 for v in ver if v > j) for j in range(gamma)]
    reached = [sum(1 for a, v in zip(acc, ver) if a >= j and v > j) for j in range(gamma)]
    return {
        "rounds": n, "new_tokens": sum(len(o.token_ids) for o in outputs),
        "mean_acceptance_length": (sum(acc) + n) / n if n else None,
        "acceptance_rate": sum(acc) / max(sum(ver), 1),
        "verified_per_round": sum(ver) / max(n, 1),
        "per_position_acceptance": [a / v if v else None for a, v in zip(accepted_at, verified_at)],
        "per_position_conditional": [a / r if r else None for a, r in zip(accepted_at, reached)],
        "accepted_histogram": [sum(1 for a in acc if a == k) for k in range(gamma + 1)],
    }


def calibration(outputs, gamma: int, bins: int = ECE_BINS) -> dict:
    """ECE of the survival product a_j = c_0 ... c_{j-1} against 1[accepted >= j], per position j = 1..γ
    (full-block rounds only), plus the raw head's mean confidence per slot."""
    rounds = [r for o in outputs for r in (o.rounds or []) if r["num_verified"] == gamma]
    if not rounds:
        return {}
    conf = np.array([r["confidence"] for r in rounds], dtype=np.float64)  # [R, γ]
    acc = np.array([r["num_accepted"] for r in rounds])
    surv = np.cumprod(conf, axis=1)  # surv[:, j-1] = a_j
    per_pos, all_s, all_y = [], [], []
    for j in range(1, gamma + 1):
        s, y = surv[:, j - 1], (acc >= j).astype(np.float64)
        per_pos.append({"position": j, "ece": ece(s, y, bins), "mean_survival": float(s.mean()),
                        "empirical": float(y.mean())})
        all_s.append(s)
        all_y.append(y)
    return {"rounds": len(rounds), "bins": bins, "per_position": per_pos,
            "ece_pooled": ece(np.concatenate(all_s), np.concatenate(all_y), bins),
            "ece_mean_over_positions": float(np.mean([p["ece"] for p in per_pos])),
            "mean_confidence_per_slot": conf.mean(0).tolist()}


def ece(p: np.ndarray, y: np.ndarray, bins: int) -> float:
    idx = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            total += m.sum() / len(p) * abs(p[m].mean() - y[m].mean())
    return float(total)


# ---------------------------------------------------------------- runs

def run_acceptance(llm, prompts: dict[str, list[list[int]]], max_tokens: int, gamma: int, **params) -> dict:
    from sparkdec.sampling import SamplingParams

    sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, **params)
    res, outs_all = {}, {}
    for cat, ps in prompts.items():
        t0 = time.perf_counter()
        outs = llm.generate(ps, sp, trace=True)
        res[cat] = pooled_stats(outs, gamma) | {"prompts": len(ps), "seconds": round(time.perf_counter() - t0, 1)}
        outs_all[cat] = outs
    return {"per_category": res}, outs_all


def perplexity(target_dir, tokens_dir, seq_len: int = 1024, max_windows: int = 10_000) -> dict:
    import torch
    from transformers import Qwen3ForCausalLM

    from sparkdec.train.target import load_stream, stream_loss

    model = Qwen3ForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    out = {}
    for cat in CATEGORIES:
        stream = load_stream(tokens_dir, "heldout", cat)
        loss = stream_loss(model, stream, seq_len, "cpu", max_windows=max_windows, batch=4)
        out[cat] = {"loss": loss, "perplexity": float(np.exp(loss)), "tokens": int(len(stream))}
    return out


def function_completion(target_dir, corpus_dir, n: int, max_new_tokens: int = 192) -> dict:
    """Greedy completions from the target (HF transformers, same greedy tokens the engine commits)."""
    import torch
    from transformers import Qwen3ForCausalLM

    from sparkdec.tokenizer import Tokenizer

    tok = Tokenizer(target_dir)
    model = Qwen3ForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    items = function_prompts(corpus_dir, n)
    results = []
    for it in items:
        ids = torch.tensor([tok.encode(it["prompt"])])
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=list(tok.eos_token_ids),
                                 pad_token_id=tok.eos_token_ids[0])
        completion = tok.decode(out[0, ids.shape[1]:].tolist())
        body, ended = cut_function(it["prompt"], completion)
        ok = parses(it["prompt"], body)
        results.append({"source": it["source"], "name": it["name"], "line": it["line"], "parses": ok,
                        "ended": ended, "body_lines": sum(1 for ln in body.split("\n") if ln.strip()),
                        "completion": body})
    n = max(len(results), 1)
    # NOTE: an empty completion leaves a docstring-only function, which parses; it does not count as written.
    return {"prompts": len(results),
            "parse_fraction": sum(r["parses"] and r["body_lines"] > 0 for r in results) / n,
            "parse_fraction_including_empty": sum(r["parses"] for r in results) / n,
            "ended_fraction": sum(r["ended"] for r in results) / max(len(results), 1),
            "max_new_tokens": max_new_tokens, "examples": results}


def main(args) -> int:
    from sparkdec import LLM

    out_path = Path(args.out)
    report = json.loads(out_path.read_text()) if out_path.is_file() else {}

    def save():
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=1) + "\n")

    n_prompts = 4 if args.quick else args.prompts
    max_tokens = 24 if args.quick else args.max_tokens
    if "perplexity" not in report:
        report["perplexity"] = perplexity(args.target, args.tokens, max_windows=2 if args.quick else 10_000)
        save()
        print("perplexity", json.dumps(report["perplexity"]), flush=True)
    drafters = {Path(d).name: d for d in args.draft}
    for path in args.ablation or []:
        drafters[Path(path).name] = path
    report.setdefault("acceptance", {})
    llms = {}
    for name, path in drafters.items():
        if name in report["acceptance"]:
            continue
        llm = LLM(model=args.target, draft=path, device="cpu")
        llms[name] = llm
        gamma = llm.engine.block_size
        prompts = {c: heldout_prompts(args.corpus, llm.tokenizer, c, n_prompts, args.prompt_len) for c in CATEGORIES}
        res, outs = run_acceptance(llm, prompts, max_tokens, gamma)
        res["markov_rank"] = llm.engine.draft_cfg.markov_rank
        res["calibration"] = {c: calibration(o, gamma) for c, o in outs.items()}
        report["acceptance"][name] = res
        save()
        print(name, json.dumps({c: v["mean_acceptance_length"] for c, v in res["per_category"].items()}), flush=True)
    main_name = max(args.draft, key=lambda d: np.mean([report["acceptance"][Path(d).name]["per_category"][c]
                                                       ["mean_acceptance_length"] for c in CATEGORIES]))
    report["chosen_drafter"] = Path(main_name).name
    if "min_confidence_sweep" not in report:
        llm = LLM(model=args.target, draft=main_name, device="cpu")
        n_sweep = 2 if args.quick else max(4, n_prompts // 3)
        prompts = {c: heldout_prompts(args.corpus, llm.tokenizer, c, n_sweep, args.prompt_len) for c in CATEGORIES}
        sweep = {}
        for p in SWEEP:
            res, _ = run_acceptance(llm, prompts, max_tokens, llm.engine.block_size, min_confidence=p)
            sweep[str(p)] = res["per_category"]
            print("min_confidence", p, json.dumps({c: (v["acceptance_rate"], v["mean_acceptance_length"])
                                                   for c, v in res["per_category"].items()}), flush=True)
        report["min_confidence_sweep"] = {"drafter": Path(main_name).name, "prompts_per_category": n_sweep,
                                          "results": sweep}
        save()
    if "function_completion" not in report:
        report["function_completion"] = function_completion(args.target, args.corpus, 3 if args.quick else args.functions,
                                                            32 if args.quick else 192)
        save()
        print("function completion parse fraction", report["function_completion"]["parse_fraction"], flush=True)
    report["settings"] = {"prompts_per_category": n_prompts, "prompt_len": args.prompt_len, "max_tokens": max_tokens,
                          "temperature": 0.0, "verify": "full block (γ = 7)", "device": "cpu"}
    save()
    return 0
