"""Target recipe: tokenise the corpus into token streams, train a small Hugging Face `Qwen3ForCausalLM` from
scratch (bf16 autocast, AdamW, warm-up + cosine on a wall-clock budget, early stopping on a validation tail)
and save it as a standard HF checkpoint folder with the tokenizer files."""
from __future__ import annotations

import copy
import json
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from sparkdec.train.corpus import CATEGORIES, iter_documents

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
VAL_FRACTION = 0.02


@dataclass(frozen=True)
class TargetRecipe:
    hidden_size: int = 256
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 768
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    seq_len: int = 1024
    batch_size: int = 64
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: float = 0.04
    weight_decay: float = 0.1
    dropout: float = 0.1  # residual dropout on attention and MLP outputs (training only)
    seconds: float = 240.0  # wall-clock budget: the schedule runs on elapsed time
    max_steps: int = 0  # 0 = no step limit
    eval_every_s: float = 15.0
    seed: int = 0


# ---------------------------------------------------------------- token streams

def tokenize_corpus(corpus_dir: str | Path, tokenizer_dir: str | Path, out_dir: str | Path) -> dict:
    """Write out_dir/{split}_{category}.npy: uint16 token streams, documents joined by EOS (id of <|endoftext|>)."""
    from tokenizers import Tokenizer

    from sparkdec.train.tokenizer import special_token_ids

    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    eos = special_token_ids(tok).eos
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in ("train", "heldout"):
        for cat in CATEGORIES:
            texts = [r["text"] for r in iter_documents(corpus_dir, split, cat)]
            ids: list[int] = []
            for enc in tok.encode_batch(texts, add_special_tokens=False):
                ids.extend(enc.ids)
                ids.append(eos)
            np.save(out / f"{split}_{cat}.npy", np.asarray(ids, dtype=np.uint16))
            counts[f"{split}_{cat}"] = {"docs": len(texts), "tokens": len(ids)}
    (out / "manifest.json").write_text(json.dumps(counts, indent=2) + "\n")
    return counts


def load_stream(tokens_dir: str | Path, split: str, category: str | None = None) -> np.ndarray:
    cats = CATEGORIES if category is None else (category,)
    return np.concatenate([np.load(Path(tokens_dir) / f"{split}_{c}.npy") for c in cats])


def train_val_streams(tokens_dir: str | Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Train stream (both categories) and a validation tail of VAL_FRACTION of each category's train stream."""
    train, val = [], {}
    for c in CATEGORIES:
        s = load_stream(tokens_dir, "train", c)
        cut = int(len(s) * (1 - VAL_FRACTION))
        train.append(s[:cut])
        val[c] = s[cut:]
    return np.concatenate(train), val


class WindowSampler:
    """Random windows of length n from a token stream held on the device."""

    def __init__(self, stream: np.ndarray, device, seed: int):
        self.data = torch.from_numpy(stream.astype(np.int64)).to(device)
        self.gen = torch.Generator(device="cpu").manual_seed(seed)

    def sample(self, batch: int, n: int) -> torch.Tensor:
        starts = torch.randint(0, len(self.data) - n, (batch,), generator=self.gen).to(self.data.device)
        return self.data[starts[:, None] + torch.arange(n, device=self.data.device)]


# ---------------------------------------------------------------- schedule

def lr_at(progress: float, peak: float, warmup: float, min_ratio: float) -> float:
    """Linear warm-up over the first `warmup` fraction, then cosine down to min_ratio * peak."""
    if progress < warmup:
        return peak * max(progress, 1e-3) / warmup
    t = min(1.0, (progress - warmup) / max(1e-9, 1 - warmup))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def step_lr(opt, progress: float, recipe) -> float:
    """Set every parameter group's learning rate for this point of the schedule; returns it."""
    lr = lr_at(progress, recipe.lr, recipe.warmup, recipe.min_lr_ratio)
    for g in opt.param_groups:
        g["lr"] = lr
    return lr


class Clock:
    """Progress in [0, 1] from wall-clock time (and an optional step limit)."""

    def __init__(self, seconds: float, max_steps: int = 0):
        self.seconds, self.max_steps, self.start = seconds, max_steps, time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def progress(self, step: int) -> float:
        p = self.elapsed() / self.seconds
        if self.max_steps:
            p = max(p, step / self.max_steps)
        return min(p, 1.0)


# ---------------------------------------------------------------- model

def qwen3_config(recipe: TargetRecipe, vocab_size: int, eos_id: int = 0):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=recipe.hidden_size, intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers, num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_key_value_heads, head_dim=recipe.head_dim,
        max_position_embeddings=recipe.max_position_embeddings, rope_theta=recipe.rope_theta, rms_norm_eps=1e-6,
        tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, hidden_act="silu",
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)


def add_residual_dropout(model, p: float) -> list:
    """Dropout on every attention and MLP branch output (HF Qwen3 has none); returns the hook handles."""
    if p <= 0:
        return []

    def drop(module, args, out):
        if isinstance(out, tuple):
            return (F.dropout(out[0], p, module.training),) + tuple(out[1:])
        return F.dropout(out, p, module.training)

    return [m.register_forward_hook(drop) for layer in model.model.layers for m in (layer.self_attn, layer.mlp)]


def lm_loss(model, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of windows [B, n+1], in float32."""
    logits = model(input_ids=batch[:, :-1]).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


@torch.no_grad()
def stream_loss(model, stream: np.ndarray, seq_len: int, device, max_windows: int = 64, batch: int = 16) -> float:
    """Mean next-token loss over non-overlapping windows of a stream (at most max_windows of them)."""
    n = min(max_windows, (len(stream) - 1) // seq_len)
    data = torch.from_numpy(stream[: n * seq_len + 1].astype(np.int64))
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    for i in range(0, n, batch):
        rows = [data[j * seq_len: (j + 1) * seq_len + 1] for j in range(i, min(n, i + batch))]
        x = torch.stack(rows).to(device)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16,
                            enabled=torch.device(device).type == "cuda"):
            total += lm_loss(model, x).item() * len(rows)
        count += len(rows)
    model.train(was_training)
    return total / max(count, 1)


def save_target(model, out_dir: str | Path, tokenizer_dir: str | Path) -> Path:
    """bf16 safetensors + config.json (HF save_pretrained) + tokenizer files + the tokenizer's generation config."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = copy.deepcopy(model).to(torch.bfloat16).cpu()
    model.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES + ("generation_config.json",):
        shutil.copy(Path(tokenizer_dir) / name, out / name)  # NOTE: keeps eos ids [<|endoftext|>, <|im_end|>]
    return out


def train_target(tokens_dir: str | Path, tokenizer_dir: str | Path, out_dir: str | Path,
                 recipe: TargetRecipe = TargetRecipe(), device: str = "cuda", log=print) -> dict:
    from transformers import Qwen3ForCausalLM

    from sparkdec.train.tokenizer import load_tokenizer, special_token_ids

    torch.manual_seed(recipe.seed)
    if torch.device(device).type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    tok = load_tokenizer(tokenizer_dir)
    model = Qwen3ForCausalLM(qwen3_config(recipe, tok.get_vocab_size(), special_token_ids(tok).eos)).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"target: {n_params / 1e6:.2f} M parameters, recipe {json.dumps(asdict(recipe))}")
    train, val = train_val_streams(tokens_dir)
    log(f"train tokens {len(train)}; val tokens {({c: len(v) for c, v in val.items()})}")
    sampler = WindowSampler(train, device, recipe.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr, betas=(0.9, 0.95),
                            fused=torch.device(device).type == "cuda")
    hooks = add_residual_dropout(model, recipe.dropout)
    use_amp = torch.device(device).type == "cuda"
    clock, step, history = Clock(recipe.seconds, recipe.max_steps), 0, []
    best, best_state, next_eval, tokens_seen = float("inf"), None, recipe.eval_every_s, 0
    model.train()
    while True:
        progress = clock.progress(step)
        if progress >= 1.0:
            break
        lr = step_lr(opt, progress, recipe)
        batch = sampler.sample(recipe.batch_size, recipe.seq_len + 1)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=use_amp):
            loss = lm_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += batch.numel()
        if clock.elapsed() >= next_eval or clock.progress(step) >= 1.0:
            next_eval += recipe.eval_every_s
            vl = {c: stream_loss(model, v, recipe.seq_len, device) for c, v in val.items()}
            mean = sum(vl.values()) / len(vl)
            history.append({"step": step, "s": round(clock.elapsed(), 1), "lr": lr, "train_loss": loss.item(),
                            "val_loss": vl, "epochs": tokens_seen / len(train)})
            log(f"step {step} {clock.elapsed():.0f}s lr {lr:.2e} train {loss.item():.3f} val "
                + " ".join(f"{c} {v:.3f}" for c, v in vl.items()) + f" epochs {tokens_seen / len(train):.2f}")
            if mean < best:
                best, best_state = mean, {k: v.detach().clone() for k, v in model.state_dict().items()}
    for h in hooks:
        h.remove()
    if best_state is not None:
        model.load_state_dict(best_state)
    save_target(model, out_dir, tokenizer_dir)
    summary = {"params": n_params, "steps": step, "seconds": round(clock.elapsed(), 1), "tokens_seen": tokens_seen,
               "train_tokens": int(len(train)), "best_val_loss": best, "history": history, "recipe": asdict(recipe)}
    (Path(out_dir) / "training_log.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
