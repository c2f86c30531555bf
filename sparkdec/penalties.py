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

from sparkdec.row_processing import RowSpan, penalizes, process_rows
from sparkdec.sampling import SamplingParams
from sparkdec.staging import to_device


def processes(params: SamplingParams) -> bool:
    """Does this request rewrite or mask its logits (penalties, bias, min_p, min_tokens, guided decoding)?"""
    return rewrites(params) or params.guided is not None


def rewrites(params: SamplingParams) -> bool:
    """Does this request rewrite its logits (min_p only when it samples: greedy decoding keeps the most likely token,
    which min_p never drops)?"""
    return bool(params.logit_bias or penalizes(params) or (params.min_p > 0.0 and not params.greedy)
                or params.min_tokens or params.bad_words or params.allowed_token_ids is not None)


def processed_rows(logits: torch.Tensor, params: SamplingParams, prompt_ids: list[int], output_ids: list[int],
                   drafts, allowed: torch.Tensor | None = None, stop_ids: tuple[int, ...] = (),
                   bad_words: tuple[tuple[int, ...], ...] = (), history: History | None = None,
                   first: int = 0) -> torch.Tensor:
    """logits [n, V] of rows that choose the tokens after output_ids + drafts[:first + k] (k = 0 .. n - 1; drafts has
    at least first + n - 1 tokens: a list, or a device tensor) -> the processed rows [n, V]
    float32 (a new tensor). allowed: bool [n, V], each row's tokens under guided decoding
    (grammar_matcher.Matcher.allowed), applied first. stop_ids: the tokens min_tokens holds back (EOS, stop ids).
    history: the sequence's History (its prompt and output counted on the device once), else counted here."""
    return process_rows(logits, [row_span(logits.shape, params, prompt_ids, output_ids, drafts, allowed, stop_ids,
                                          bad_words, history, first, logits.device)])


def row_span(shape, params: SamplingParams, prompt_ids: list[int], output_ids: list[int], drafts,
             allowed: torch.Tensor | None = None, stop_ids: tuple[int, ...] = (),
             bad_words: tuple[tuple[int, ...], ...] = (), history: History | None = None, first: int = 0,
             device=None) -> RowSpan:
    """processed_rows' arguments for rows of shape [n, V] -> their RowSpan (row_processing.py), to process with
    other sequences' rows in one pass."""
    n, vocab = shape
    history = history or History()
    counts = history.output_counts(output_ids, vocab, device) if penalizes(params) else None
    seen = history.prompt_seen(prompt_ids, vocab, device) if params.repetition_penalty != 1.0 else None
    banned, tail, on_device = None, None, isinstance(drafts, torch.Tensor)
    if bad_words:
        tail = output_ids[max(len(output_ids) - max(map(len, bad_words)), 0):]  # (a word's length back is enough)
        if not on_device:
            banned = banned_rows(bad_words, tail + list(drafts[:first + n - 1]), len(tail) + first, n)
    outside = _outside(params.allowed_token_ids, vocab, str(device)) if params.allowed_token_ids is not None else None
    return RowSpan(params, n, counts, drafts[:first + n - 1], first, seen, params.min_tokens - len(output_ids) - first,
                   stop_ids, allowed, outside, banned, bad_words if on_device else (), tail)


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
            new = to_device(output_ids[done:], device)
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
        self.outside = _outside(params.allowed_token_ids, vocab, str(device)) \
            if params.allowed_token_ids is not None else None

    def apply_(self, z: torch.Tensor, k: int) -> None:
        """z [V], slot k's logits, processed in place (slot k's history: the output and drafts 0 .. k - 1)."""
        z.copy_(process_rows(z[None], [RowSpan(self.params, 1, self.counts, (), 0, self.seen, self.early - k,
                                               self.stop_ids, None, self.outside)])[0])

    def drafted(self, token: torch.Tensor) -> None:
        """Count slot k's draft (a 0-dim device tensor) into the history of the slots after it."""
        if self.counts is not None:
            self.counts[0].index_add_(0, token.view(1), torch.ones(1, device=token.device))


@functools.lru_cache(maxsize=64)
def _outside(allowed: tuple[int, ...], vocab: int, device: str) -> torch.Tensor:
    """bool [V]: the tokens allowed_token_ids leaves out (built once per list, vocabulary and device; read only)."""
    out = torch.ones(vocab, dtype=torch.bool, device=device)
    out[to_device([t for t in allowed if t < vocab], device)] = False
    return out


def _device(device) -> torch.device:
    """The device as its tensors name it ("cuda" -> "cuda:0", the current one)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def token_mask(ids: list[int], vocab: int, device) -> torch.Tensor:
    """bool [V]: which tokens occur in ids."""
    mask = torch.zeros(vocab, dtype=torch.bool, device=device)
    if ids:
        mask[to_device(ids, device)] = True
    return mask
