"""`sparkdec bench kernels`: registers the benchmark subcommands."""
from __future__ import annotations

import argparse
import datetime
import json

from sparkdec.bench.provenance import commit


def cmd_kernels(args: argparse.Namespace) -> int:
    from sparkdec.bench import kernels

    if args.max_model_len is not None and args.max_model_len < 0:
        raise SystemExit("--max-model-len must be 0 (the context + 1024) or a positive window")
    kernels.MAX_MODEL_LEN = args.max_model_len
    window = "" if args.max_model_len is None else f" --max-model-len {args.max_model_len}"
    meta = dict(date=datetime.date.today().isoformat(), commit=commit(), command="sparkdec bench kernels "
                f"--shapes {args.shapes} --contexts {args.contexts}{window}")

    def save(res: dict) -> None:  # after every shape/context, so a run cut short keeps what it measured
        res.update(meta)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(res, f, indent=1)

    res = kernels.main(tuple(args.shapes.split(",")), tuple(int(c) for c in args.contexts.split(",")),
               peer=not args.no_peer, simulate=not args.no_sim, on_run=save)
    save(res)
    print(json.dumps(res))
    return 0


def cmd_speed(args: argparse.Namespace, engine_kwargs) -> int:
    from sparkdec.bench.speed import main

    kw = engine_kwargs(args)
    kw.pop("max_num_seqs"), kw.pop("speculative")
    res = main(kw, args.prompts, [int(c) for c in args.concurrency.split(",")], args.max_tokens, args.temperature, args.seed)
    res.update(date=datetime.date.today().isoformat(), commit=commit(), model=args.model or "sparkdec-tiny",
               draft=args.draft or "default")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    print(json.dumps(res))
    return 0


def register(sub, add_engine_args, engine_kwargs) -> None:
    b = sub.add_parser("bench", help="benchmarks (run on a GPU)")
    bsub = b.add_subparsers(dest="bench_command", required=True)
    k = bsub.add_parser("kernels", help="decode/verify/propose cost against the memory floor, random weights")
    k.add_argument("--shapes", default="qwen3-4b,qwen3-8b")
    k.add_argument("--contexts", default="1024,8192")
    k.add_argument("--max-model-len", type=int, help="the engines' context window, which sizes the graphs' attention "
                   "grids (default: the model's own, as a served model runs; 0: the context + 1024)")
    k.add_argument("--no-peer", action="store_true", help="skip the Hugging Face eager peer")
    k.add_argument("--no-sim", action="store_true", help="skip the simulated-acceptance rounds")
    k.add_argument("--out", help="write the JSON here too")
    k.set_defaults(func=cmd_kernels)
    s = bsub.add_parser("speed", help="A/B: speculative vs plain tokens/s, acceptance per category, per concurrency")
    add_engine_args(s)
    s.add_argument("--prompts", help="JSONL with prompt and category (default: a small built-in code/prose set)")
    s.add_argument("--concurrency", default="1,4,8")
    s.add_argument("--max-tokens", type=int, default=128)
    s.add_argument("--temperature", type=float, default=0.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", help="write the JSON here too")
    s.set_defaults(func=lambda a: cmd_speed(a, engine_kwargs))
