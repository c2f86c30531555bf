"""Logit processing a request asks for (logit_bias, repetition / frequency / presence penalties, min_p): the target's
logit rows rewritten before a token is chosen from them.

Row k of a sequence's verify chooses the token after prompt + output + drafts[:k], so it is processed with that history;
if those drafts are accepted, it is the history plain decoding has at that position, and plain decoding processes its
one row with the same function. Every operation is per element or an exact per-row maximum, so a row's bits do not
depend on how many rows or sequences are processed with it: speculative output stays equal to plain output.
"""
from __future__ import annotations

import functools

import torch

from sparkdec.sampling import SamplingParams


def processes(params: SamplingParams) -> bool:
    """Does this request rewrite or mask its logits (penalties, bias, min_p, min_tokens, guided decoding)?"""
    return rewrites(params) or params.guided is not None


def rewrites(params: SamplingParams) -> bool:
    """Does this request rewrite its logits (min_p only when it samples: greedy decoding keeps the most likely token,
    which min_p never drops)?"""
    return bool(params.logit_bias or penalizes(params) or (params.min_p > 0.0 and not params.greedy)
                or params.min_tokens or params.bad_words or params.allowed_token_ids is not None)


def penalizes(params: SamplingParams) -> bool:
    return params.repetition_penalty != 1.0 or bool(params.frequency_penalty or params.presence_penalty)


def processed_rows(logits: torch.Tensor, params: SamplingParams, prompt_ids: list[int], output_ids: list[int],
                   drafts, allowed: torch.Tensor | None = None, stop_ids: tuple[int, ...] = (),
                   bad_words: tuple[tuple[int, ...], ...] = (), history: History | None = None,
                   first: int = 0) -> torch.Tensor:
    """logits [n, V] of rows that choose the tokens after output_ids + drafts[:first + k] (k = 0 .. n - 1; drafts has
    at least first + n - 1 tokens: a list, or a device tensor when there are no bad words) -> the processed rows [n, V]
    float32 (a new tensor). allowed: bool [n, V], each row's tokens under guided decoding
    (grammar_matcher.Matcher.allowed), applied first. stop_ids: the tokens min_tokens holds back (EOS, stop ids).
    history: the sequence's History (its prompt and output counted on the device once), else counted here."""
    n, vocab = logits.shape
    history = history or History()
    counts = history_counts(history.output_counts(output_ids, vocab, logits.device), drafts[:first + n - 1], n,
                            first) if penalizes(params) else None
    seen = history.prompt_seen(prompt_ids, vocab, logits.device) if params.repetition_penalty != 1.0 else None
    banned = None
    if bad_words:
        tail = output_ids[max(len(output_ids) - max(map(len, bad_words)), 0):]  # (a word's length back is enough)
        banned = banned_rows(bad_words, tail + list(drafts[:first + n - 1]), len(tail) + first, n)
    return process(logits, params, counts, seen, params.min_tokens - len(output_ids) - first, stop_ids, allowed,
                   banned)


class History:
    """A sequence's penalty history on the device, kept as its output grows: which tokens its prompt holds (bool [V],
    built once) and how often each occurs in its output (float32 [V], exact integers, counted as tokens come). Built
    from the lists every round it cost 1.5-2.3 ms at 8k prompt + 4k output tokens, kept 0.003 ms (CPU,
    scripts/history_cost.py, history_cost_cpu_2026-12-05.json)."""

    def __init__(self):
        self.seen: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None
        self.counted, self.last = 0, None  # output tokens in counts (a prefix of the output), the last of them

    def prompt_seen(self, prompt_ids: list[int], vocab: int, device) -> torch.Tensor:
        if self.seen is None or self.seen.device != _device(device):
            self.seen = token_mask(prompt_ids, vocab, device)
        return self.seen

    def output_counts(self, output_ids: list[int], vocab: int, device) -> torch.Tensor:
        """[V]: each token's count in output_ids (the counted ones must be its prefix, or all are counted again)."""
        done = self.counted
        if (self.counts is None or self.counts.device != _device(device) or len(output_ids) < done
                or (done and output_ids[done - 1] != self.last)):
            self.counts, done = torch.zeros(vocab, device=device), 0
        if len(output_ids) > done:
            new = torch.tensor(output_ids[done:], device=device)
            self.counts.index_add_(0, new, torch.ones(len(new), device=device))  # (integer sums: exact in any order)
        self.counted, self.last = len(output_ids), output_ids[-1] if output_ids else None
        return self.counts


def banned_rows(bad_words: tuple[tuple[int, ...], ...], history: list[int], start: int, n: int) -> list[list[int]]:
    """Per row k (after history[:start + k]): the tokens bad words forbid there, each word's last token where its
    other tokens end the history (a one-token word everywhere), as vLLM's bad_words."""
    rows = []
    for k in range(n):
        seen = history[:start + k]
        rows.append([w[-1] for w in bad_words if len(w) == 1 or (len(seen) >= len(w) - 1
                                                                 and seen[len(seen) - len(w) + 1:] == list(w[:-1]))])
    return rows


def process(logits: torch.Tensor, params: SamplingParams, counts: torch.Tensor | None, prompt_seen: torch.Tensor | None,
            early: int, stop_ids: tuple[int, ...], allowed: torch.Tensor | None = None,
            banned: list[list[int]] | None = None) -> torch.Tensor:
    """logits [n, V] -> processed [n, V] float32 (a new tensor), in this order: the guided mask (allowed),
    params.allowed_token_ids (every other token out), bad words
    (banned: per row, the tokens it may not choose), min_tokens
    (its first `early` rows never choose stop_ids), logit_bias, the repetition penalty (tokens counted in counts
    [n, V] or seen in prompt_seen [V]), frequency and presence penalties (counts), min_p."""
    x = logits.float().clone()  # [n, V]
    n, vocab = x.shape
    if allowed is not None:
        x = x.masked_fill(~allowed, float("-inf"))
    if params.allowed_token_ids is not None:
        x = x.masked_fill(_outside(params.allowed_token_ids, vocab, str(x.device)), float("-inf"))
    for k, ids in enumerate(banned or ()):
        if ids:
            x[k, torch.tensor(ids, device=x.device)] = float("-inf")
    early = min(n, early)
    if early > 0 and stop_ids:
        ids = torch.tensor([t for t in stop_ids if t < vocab], dtype=torch.long, device=x.device)
        x[:early, ids] = float("-inf")
    if params.logit_bias:
        ids = torch.tensor([t for t, _ in params.logit_bias], device=x.device)
        x[:, ids] += torch.tensor([b for _, b in params.logit_bias], dtype=torch.float32, device=x.device)
    if counts is not None:
        if params.repetition_penalty != 1.0:
            seen = (counts > 0) | prompt_seen[None, :]
            rp = params.repetition_penalty
            x = torch.where(seen, torch.where(x > 0, x / rp, x * rp), x)
        if params.frequency_penalty:
            x = x - params.frequency_penalty * counts
        if params.presence_penalty:
            x = x - params.presence_penalty * (counts > 0).float()
    if params.min_p > 0.0 and not params.greedy:
        scaled = x / params.temperature  # p_i / p_max = exp(scaled_i - max)
        ratio = torch.exp(scaled - scaled.max(dim=-1, keepdim=True).values)
        x = x.masked_fill(ratio < params.min_p, float("-inf"))  # the most likely token (ratio 1) always stays
    return x


class DraftProcessing:
    """A rewriting sequence's drafter logits, processed slot by slot as the verify will process the row that checks
    that slot's draft (so drafts follow the penalties, bias and min_tokens the target's rows will), with the drafts so
    far counted on the device: no host read."""

    def __init__(self, params: SamplingParams, prompt_ids: list[int], output_ids: list[int],
                 stop_ids: tuple[int, ...], vocab: int, device, history: History | None = None):
        self.params, self.stop_ids, self.early = params, stop_ids, params.min_tokens - len(output_ids)
        history = history or History()
        self.counts = history.output_counts(output_ids, vocab, device)[None].clone() if penalizes(params) else None
        self.seen = history.prompt_seen(prompt_ids, vocab, device) if params.repetition_penalty != 1.0 else None

    def apply_(self, z: torch.Tensor, k: int) -> None:
        """z [V], slot k's logits, processed in place (slot k's history: the output and drafts 0 .. k - 1)."""
        z.copy_(process(z[None], self.params, self.counts, self.seen, self.early - k, self.stop_ids)[0])

    def drafted(self, token: torch.Tensor) -> None:
        """Count slot k's draft (a 0-dim device tensor) into the history of the slots after it."""
        if self.counts is not None:
            self.counts[0].index_add_(0, token.view(1), torch.ones(1, device=token.device))


@functools.lru_cache(maxsize=64)
def _outside(allowed: tuple[int, ...], vocab: int, device: str) -> torch.Tensor:
    """bool [V]: the tokens allowed_token_ids leaves out (built once per list, vocabulary and device; read only)."""
    out = torch.ones(vocab, dtype=torch.bool, device=device)
    out[torch.tensor([t for t in allowed if t < vocab], dtype=torch.long, device=device)] = False
    return out


def _device(device) -> torch.device:
    """The device as its tensors name it ("cuda" -> "cuda:0", the current one)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def history_counts(output_counts: torch.Tensor, drafts, n: int, first: int = 0) -> torch.Tensor:
    """output_counts [V] (History.output_counts) -> [n, V] float32 (exact integers): row k counts each token in the
    output + drafts[:first + k]. drafts: a list, or a device tensor (no host read)."""
    if len(drafts) == 0:
        return output_counts[None].expand(n, -1)
    device = output_counts.device
    ids = drafts.to(device) if isinstance(drafts, torch.Tensor) else torch.tensor(drafts, device=device)
    steps = torch.zeros(first + n, output_counts.shape[0], device=device)
    steps[torch.arange(1, len(ids) + 1, device=device), ids] = 1.0
    return output_counts[None] + steps.cumsum(dim=0)[first:]  # row k: drafts 0 .. first + k - 1


def token_mask(ids: list[int], vocab: int, device) -> torch.Tensor:
    """bool [V]: which tokens occur in ids."""
    mask = torch.zeros(vocab, dtype=torch.bool, device=device)
    if ids:
        mask[torch.tensor(ids, device=device)] = True
    return mask
