"""`sparkdec` training commands: build-corpus, train-tokenizer, tokenize, train-target, gen-continuations,
train-draft, package-pair and eval-pair (the recipe of docs/training.md)."""
from __future__ import annotations

import argparse
import json
import sys


def _log(msg: str) -> None:
    print(msg, flush=True)


def _device(name: str | None) -> str:
    import torch

    return name or ("cuda" if torch.cuda.is_available() else "cpu")


def cmd_build_corpus(args) -> int:
    from sparkdec.train.corpus import build_corpus

    print(json.dumps(build_corpus(args.out_dir, code_root=args.code_root, prose_root=args.prose_root,
                                  max_bytes_per_category=args.max_bytes_per_category), indent=2))
    return 0


def cmd_train_tokenizer(args) -> int:
    from sparkdec.train.tokenizer import main

    main([args.corpus_dir, args.out_dir, "--vocab-size", str(args.vocab_size)])
    return 0


def cmd_tokenize(args) -> int:
    from sparkdec.train.target import tokenize_corpus

    print(json.dumps(tokenize_corpus(args.corpus_dir, args.tokenizer_dir, args.out_dir), indent=2))
    return 0


def cmd_train_target(args) -> int:
    from sparkdec.train.target import TargetRecipe, train_target

    recipe = TargetRecipe(hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                          num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                          intermediate_size=args.intermediate_size, seq_len=args.seq_len, batch_size=args.batch_size,
                          lr=args.lr, dropout=args.dropout, seconds=args.seconds, max_steps=args.max_steps,
                          seed=args.seed)
    out = train_target(args.tokens, args.tokenizer, args.out, recipe, _device(args.device), log=_log)
    _log(json.dumps({k: v for k, v in out.items() if k != "history"}))
    return 0


def cmd_gen_continuations(args) -> int:
    from sparkdec.train.generate import generate_continuations
    from sparkdec.train.target import train_val_streams

    train, _ = train_val_streams(args.tokens)
    out = generate_continuations(args.target, train, args.out, num_rows=args.rows, batch_size=args.batch_size,
                                 total_len=args.length, device=_device(args.device), seed=args.seed,
                                 max_seconds=args.max_seconds, log=_log)
    _log(json.dumps(out))
    return 0


def cmd_train_draft(args) -> int:
    from sparkdec.train.draft import DraftData, DraftRecipe, train_draft
    from sparkdec.train.generate import load_continuations
    from sparkdec.train.target import train_val_streams

    device = _device(args.device)
    recipe = DraftRecipe(num_layers=args.layers, target_layer_ids=tuple(args.taps), markov_rank=args.markov_rank,
                         num_anchors=args.anchors, seq_len=args.seq_len, batch_size=args.batch_size, lr=args.lr,
                         seconds=args.seconds, max_steps=args.max_steps, seed=args.seed)
    train, val = train_val_streams(args.tokens)
    import numpy as np

    val_stream = np.concatenate(list(val.values()))
    vals = {"corpus_val": DraftData(device, recipe.seq_len, 7, stream=val_stream)}
    if args.continuations:
        rows, plens = load_continuations(args.continuations)
        n_val = max(1, len(rows) // 50)
        data = DraftData(device, recipe.seq_len, args.seed, rows=rows[n_val:], prompt_lens=plens[n_val:])
        vals["gen_val"] = DraftData(device, recipe.seq_len, 7, rows=rows[:n_val], prompt_lens=plens[:n_val])
    else:
        data = DraftData(device, recipe.seq_len, args.seed, stream=train)
    out = train_draft(args.target, data, args.out, recipe, device, log=_log, val=vals,
                      include_shared=not args.no_shared)
    _log(json.dumps({k: v for k, v in out.items() if k != "history"}))
    return 0


def shard_checkpoint(src, dst, max_shard_bytes: int = 12 << 20) -> None:
    """Write src's tensors to dst as HF shards of at most max_shard_bytes plus model.safetensors.index.json
    (keeps every shipped file well under 16 MiB)."""
    from safetensors.torch import save_file

    from sparkdec.models.loader import read_tensors

    tensors = read_tensors(src)
    shards, current, size = [], {}, 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name], size = tensors[name].contiguous(), size + nbytes
    shards.append(current)
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(dst / fname), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, fname))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                  "weight_map": weight_map}, indent=1))


def cmd_package_pair(args) -> int:
    import shutil
    from pathlib import Path

    from sparkdec.train.draft import package_drafter

    out = Path(args.out)
    (out / "target").mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(args.target) / name, out / "target" / name)
    shard_checkpoint(Path(args.target), out / "target")
    package_drafter(args.draft, args.target, out / "draft")
    sizes = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    _log(json.dumps({"files": sizes, "total_bytes": sum(sizes.values()),
                     "total_mib": round(sum(sizes.values()) / 2 ** 20, 2)}, indent=1))
    return 0


def cmd_eval_pair(args) -> int:
    from sparkdec.train.evaluate import main

    return main(args)


def register(subparsers, add_engine_args, engine_kwargs) -> None:
    p = subparsers.add_parser("build-corpus", help="build the code/prose training corpus (train/held-out jsonl)")
    p.add_argument("out_dir")
    p.add_argument("--code-root")
    p.add_argument("--prose-root")
    p.add_argument("--max-bytes-per-category", type=int)
    p.set_defaults(func=cmd_build_corpus)

    p = subparsers.add_parser("train-tokenizer", help="train the byte-level BPE tokenizer on a corpus")
    p.add_argument("corpus_dir")
    p.add_argument("out_dir")
    p.add_argument("--vocab-size", type=int, default=8192)
    p.set_defaults(func=cmd_train_tokenizer)

    p = subparsers.add_parser("tokenize", help="tokenise a corpus into uint16 token streams per split/category")
    p.add_argument("corpus_dir")
    p.add_argument("tokenizer_dir")
    p.add_argument("out_dir")
    p.set_defaults(func=cmd_tokenize)

    p = subparsers.add_parser("train-target", help="train a small Qwen3ForCausalLM target from scratch")
    p.add_argument("--tokens", required=True, help="folder written by `sparkdec tokenize`")
    p.add_argument("--tokenizer", required=True, help="tokenizer folder (tokenizer.json, tokenizer_config.json, ...)")
    p.add_argument("--out", required=True)
    p.add_argument("--hidden-size", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--intermediate-size", type=int, default=768)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seconds", type=float, default=240.0, help="wall-clock training budget")
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device")
    p.set_defaults(func=cmd_train_target)

    p = subparsers.add_parser("gen-continuations", help="continue training-corpus prompts with the target")
    p.add_argument("--target", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--out", required=True, help="output .npz")
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--length", type=int, default=512, help="prompt + continuation tokens per row")
    p.add_argument("--max-seconds", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device")
    p.set_defaults(func=cmd_gen_continuations)

    p = subparsers.add_parser("train-draft", help="train a DSpark drafter (DeepSpec format) for a target")
    p.add_argument("--target", required=True)
    p.add_argument("--tokens", required=True, help="token streams (corpus training data and validation)")
    p.add_argument("--continuations", help=".npz from gen-continuations: train on target outputs instead")
    p.add_argument("--out", required=True)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--taps", type=int, nargs="+", default=[1, 3, 5])
    p.add_argument("--markov-rank", type=int, default=64)
    p.add_argument("--anchors", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-shared", action="store_true", help="omit the embed_tokens/lm_head copies")
    p.add_argument("--device")
    p.set_defaults(func=cmd_train_draft)

    p = subparsers.add_parser("package-pair", help="write target/ and draft/ (with the DeepSpec embed/lm_head copies)")
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True, help="drafter trained with --no-shared")
    p.add_argument("--out", required=True, help="e.g. models/sparkdec-tiny")
    p.set_defaults(func=cmd_package_pair)

    p = subparsers.add_parser("eval-pair", help="evaluate a target/drafter pair with the engine (report JSON)")
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True, nargs="+", help="drafter folder(s); the first is the main one")
    p.add_argument("--ablation", nargs="*", default=[], help="markov_rank 0 drafter folder(s), the first matches the main drafter")
    p.add_argument("--corpus", required=True, help="corpus folder (held-out split)")
    p.add_argument("--tokens", required=True, help="token streams folder (held-out perplexity)")
    p.add_argument("--out", required=True, help="report JSON path")
    p.add_argument("--prompts", type=int, default=40, help="held-out prompts per category")
    p.add_argument("--prompt-len", type=int, default=96)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--functions", type=int, default=50)
    p.add_argument("--quick", action="store_true", help="small run for testing")
    p.set_defaults(func=cmd_eval_pair)


def main(argv: list[str] | None = None) -> None:
    """`python -m sparkdec.train.cli CMD ...`: the training commands alone, without the server's dependencies."""
    parser = argparse.ArgumentParser(prog="python -m sparkdec.train.cli", description=__doc__)
    register(parser.add_subparsers(dest="command", required=True), None, None)
    args = parser.parse_args(argv)
    sys.exit(args.func(args))


if __name__ == "__main__":
    main()
