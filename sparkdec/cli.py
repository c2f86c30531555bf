"""`sparkdec` command line: generate, serve, bench and the training recipe."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sparkdec.errors import SparkdecError


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="target checkpoint folder (Hugging Face Qwen3); default: shipped tiny pair")
    p.add_argument("--draft", help="DSpark drafter folder (DeepSpec format); default with no --model: shipped drafter")
    p.add_argument("--no-spec", action="store_true", help="plain decoding even when a drafter is loaded")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", help="float32, bfloat16 or float16 (default: float32 on CPU, bfloat16 on CUDA)")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--kv-cache-tokens", type=int, help="KV cache capacity in tokens")
    p.add_argument("--kv-cache-memory-fraction", type=float, default=0.5,
                   help="without --kv-cache-tokens, the share of the GPU's free memory (after the weights) the KV "
                        "cache takes (default 0.5)")
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=1024,
                   help="tokens one step computes at most: prompt chunks and decode rows (default 1024; raised to "
                        "fit every running sequence's verify rows)")
    p.add_argument("--no-prefix-caching", action="store_true",
                   help="compute every prompt in full (by default a prompt's full pages stay cached for later prompts)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (1 is fastest for tiny models on a busy machine)")
    p.add_argument("--verify-len", type=int, help="verify a fixed number of drafts per round")
    p.add_argument("--min-confidence", type=float, help="verify drafts up to the first confidence below P")
    p.add_argument("--verify-policy", choices=["full", "batch"], default="full",
                   help="batch: choose how many drafts each sequence verifies across the batch (Algorithm 1) "
                        "from a verify-cost profile taken at start-up")
    p.add_argument("--no-spec-bypass", action="store_true",
                   help="speculate every round (by default sequences whose drafts are not expected to pay, by "
                        "measured costs and their acceptance, decode plainly until probed again)")
    p.add_argument("--accept", choices=["exact", "rejection"], default="exact",
                   help="sampled acceptance: exact (target's own keyed sample) or rejection sampling")


def engine_kwargs(args: argparse.Namespace) -> dict:
    return dict(model=args.model, draft=None if args.no_spec and args.model else args.draft,
                device=args.device, dtype=args.dtype, max_model_len=args.max_model_len,
                kv_cache_tokens=args.kv_cache_tokens, kv_cache_memory_fraction=args.kv_cache_memory_fraction,
                max_num_seqs=args.max_num_seqs, max_batched_tokens=args.max_num_batched_tokens,
                verify_len=args.verify_len, min_confidence=args.min_confidence, verify_policy=args.verify_policy,
                accept_mode=args.accept,
                speculative=not args.no_spec, spec_bypass=not args.no_spec_bypass, threads=args.threads,
                prefix_caching=not args.no_prefix_caching)


def cmd_generate(args: argparse.Namespace) -> int:
    from sparkdec.engine.llm_engine import Engine, EngineConfig
    from sparkdec.llm import request_stats
    from sparkdec.sampling import SamplingParams
    from sparkdec.spec.commit import stable_prefix

    prompt = args.prompt_opt or args.prompt or sys.stdin.read()
    engine = Engine(EngineConfig(**engine_kwargs(args)))
    if args.chat:
        if engine.tokenizer is None:
            raise SparkdecError("--chat needs the model's tokenizer.json and chat template; pass a plain prompt")
        prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                            max_tokens=args.max_tokens, seed=args.seed, ignore_eos=args.ignore_eos, min_p=args.min_p,
                            repetition_penalty=args.repetition_penalty, presence_penalty=args.presence_penalty,
                            frequency_penalty=args.frequency_penalty, min_tokens=args.min_tokens,
                            stop=tuple(args.stop or ()), guided=guided_arg(args))
    seq = engine.add_request(prompt, params, trace=bool(args.trace))
    shown = 0
    while engine.has_unfinished():
        engine.step()
        text = seq.text if seq.finished else stable_prefix(seq.text, params.stop)  # (what may not change)
        sys.stdout.write(text[shown:])
        sys.stdout.flush()
        shown = len(text)
    sys.stdout.write("\n")
    st = request_stats(seq)
    line = (f"[prompt {st['prompt_tokens']} tok | new {st['new_tokens']} tok | prefill {st['prefill_s'] * 1e3:.1f} ms | "
            f"decode {st['decode_s'] * 1e3:.1f} ms | {st['tokens_per_s'] or 0:.1f} tok/s")
    if st["rounds"]:
        rates = " ".join(f"{r:.2f}" if r is not None else "-" for r in st["per_position_acceptance"])
        line += f" | rounds {st['rounds']} | AL {st['mean_acceptance_length']:.2f} | per-position {rates}"
    if st["bypassed_tokens"]:  # (spec/bypass.py: decoded plainly where drafts were not expected to pay)
        line += f" | {st['bypassed_tokens']} tok plain (bypass)"
    print(line + "]", file=sys.stderr)
    if args.timing or os.environ.get("SPARKDEC_TIMING") == "1":
        print(timing_line(engine.rounds.timing), file=sys.stderr)
    if args.trace:
        with open(args.trace, "w") as f:
            for r in seq.rounds or []:
                f.write(json.dumps(r) + "\n")
    return 0


def guided_arg(args: argparse.Namespace):
    """--json-schema FILE, --json or --regex as the request's Guided (None without them)."""
    from sparkdec.guided import Guided

    if sum(x is not None and x is not False for x in (args.json_schema, args.json, args.regex)) > 1:
        raise SparkdecError("give one of --json-schema, --json and --regex")
    if args.json_schema:
        try:
            return Guided(json=json.loads(Path(args.json_schema).expanduser().read_text()))
        except (OSError, ValueError) as exc:
            raise SparkdecError(f"--json-schema {args.json_schema}: not a readable JSON file ({exc})") from None
    if args.json:
        return Guided(json=True)
    return Guided(regex=args.regex) if args.regex is not None else None


def timing_line(t: dict) -> str:
    n = max(t["steps"], 1)
    return (f"[round anatomy over {t['steps']} steps: propose {t['propose'] / n * 1e3:.2f} ms, "
            f"verify {t['verify'] / n * 1e3:.2f} ms, accept/commit {t['accept'] / n * 1e3:.2f} ms, "
            f"host (schedule, bookkeeping) {t['host'] / n * 1e3:.2f} ms per step]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkdec", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate text for one prompt, streamed to the terminal")
    g.add_argument("prompt", nargs="?", help="prompt text (default: read stdin)")
    g.add_argument("--prompt", dest="prompt_opt")
    add_engine_args(g)
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--min-tokens", type=int, default=0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--presence-penalty", type=float, default=0.0)
    g.add_argument("--frequency-penalty", type=float, default=0.0)
    g.add_argument("--seed", type=int)
    g.add_argument("--stop", action="append", help="a stop string (repeat for several)")
    g.add_argument("--json", action="store_true", help="the output is a JSON object (guided decoding)")
    g.add_argument("--json-schema", help="a JSON schema file the output follows (guided decoding)")
    g.add_argument("--regex", help="a regular expression the output matches (guided decoding)")
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--trace", metavar="FILE.jsonl", help="write one JSON record per speculative round")
    g.add_argument("--timing", action="store_true", help="print the round anatomy (also SPARKDEC_TIMING=1)")
    g.set_defaults(func=cmd_generate)
    for module in ("sparkdec.server.app", "sparkdec.bench.cli", "sparkdec.train.cli"):
        try:
            __import__(module, fromlist=["register"]).register(sub, add_engine_args, engine_kwargs)
        except ImportError as exc:  # an optional part whose dependencies are not installed here
            missing[module] = exc
    return parser


missing: dict[str, ImportError] = {}


def main(argv: list[str] | None = None) -> None:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit:
        for module, exc in missing.items():
            print(f"sparkdec: note: {module} unavailable ({exc}); install sparkdec with its dependencies", file=sys.stderr)
        raise
    try:
        code = args.func(args)
    except SparkdecError as exc:
        print(f"sparkdec: error: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)
