"""On-policy drafter data (spec §15.1): the trained target continues prompts cut from the training corpus.

Batched KV-cached decoding with the Hugging Face model; each batch shares one prompt length so no padding is
needed. Half of the batches decode greedily (what the engine is measured on), half sample at temperature 0.8.
Output: an .npz with `rows` [N, prompt_len + new_tokens] (uint16) and `prompt_lens` [N].
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch


@torch.no_grad()
def continue_batch(model, prompts: torch.Tensor, new_tokens: int, temperature: float,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """prompts [B, P] -> [B, P + new_tokens]; greedy when temperature == 0. EOS is not special here."""
    out = model(input_ids=prompts, use_cache=True)
    past, tokens = out.past_key_values, [prompts]
    for i in range(new_tokens):
        logits = out.logits[:, -1].float()
        if temperature > 0:
            probs = torch.softmax(logits / temperature, -1)
            nxt = torch.multinomial(probs, 1, generator=generator)
        else:
            nxt = logits.argmax(-1, keepdim=True)
        tokens.append(nxt)
        if i + 1 < new_tokens:
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
    return torch.cat(tokens, 1)


def generate_continuations(target_dir: str | Path, stream: np.ndarray, out_path: str | Path, *, num_rows: int = 8192,
                           batch_size: int = 2048, total_len: int = 512, prompt_lens=(64, 96, 128),
                           temperatures=(0.0, 0.8), device: str = "cuda", seed: int = 0, max_seconds: float = 0.0,
                           log=print) -> dict:
    """Continue random windows of `stream` (token ids) with the target; write rows and prompt lengths.
    Stops early (keeping finished batches) once max_seconds (if > 0) have passed."""
    from sparkdec.train.draft import load_hf_target

    dev = torch.device(device)
    model = load_hf_target(target_dir, dev, torch.bfloat16 if dev.type == "cuda" else torch.float32)
    rng = np.random.default_rng(seed)
    gen = torch.Generator(device=dev).manual_seed(seed)
    rows, plens, start = [], [], time.perf_counter()
    for i in range(-(-num_rows // batch_size)):
        if max_seconds and rows and time.perf_counter() - start > max_seconds:
            log(f"generation budget of {max_seconds}s spent after {i} batches")
            break
        b = min(batch_size, num_rows - i * batch_size)
        plen = min(int(prompt_lens[i % len(prompt_lens)]), total_len // 2)
        temp = float(temperatures[i % len(temperatures)])
        starts = rng.integers(0, len(stream) - plen, size=b)
        prompts = torch.from_numpy(np.stack([stream[s:s + plen] for s in starts]).astype(np.int64)).to(dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            full = continue_batch(model, prompts, total_len - plen, temp, gen)
        rows.append(full.cpu().numpy().astype(np.uint16))
        plens.append(np.full(b, plen, dtype=np.int32))
        log(f"generated batch {i}: {b} x ({plen} + {total_len - plen}) at T={temp} "
            f"({time.perf_counter() - start:.1f}s)")
    rows_np, plens_np = np.concatenate(rows), np.concatenate(plens)
    np.savez(out_path, rows=rows_np, prompt_lens=plens_np)
    return {"rows": int(len(rows_np)), "generated_tokens": int((total_len - plens_np).sum()),
            "seconds": round(time.perf_counter() - start, 1)}


def load_continuations(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    data = np.load(path)
    return data["rows"], data["prompt_lens"]
