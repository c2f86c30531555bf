"""Logit processing (penalties.py's rules) of many sequences' rows in one pass: a fixed number of launches whatever the
number of sequences, each operation per element with per-row parameters, so a row's bits never depend on which rows
share the pass (speculative rows equal plain decoding's, processed alone or in a batch)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sparkdec.sampling import SamplingParams
from sparkdec.staging import floats_to_device, to_device

NEG = float("-inf")


@dataclass
class RowSpan:
    """One sequence's n consecutive rows; row k chooses the token after its output and drafts[:first + k]."""
    params: SamplingParams
    n: int
    counts: torch.Tensor | None = None  # [V] the output's token counts (or [n, V] per row), when it penalizes
    drafts: object = ()  # a list, or a device tensor (no host read): counted into the rows after each
    first: int = 0
    seen: torch.Tensor | None = None  # bool [V]: the prompt's tokens (the repetition penalty)
    early: int = 0  # its first `early` rows never choose stop_ids (min_tokens)
    stop_ids: tuple[int, ...] = ()
    allowed: torch.Tensor | None = None  # bool [n, V]: the grammar's tokens per row (guided decoding)
    outside: torch.Tensor | None = None  # bool [V]: the tokens allowed_token_ids leaves out
    banned: list[list[int]] | None = None  # per row, the tokens bad words forbid there (drafts on the host)
    bad_words: tuple[tuple[int, ...], ...] = ()  # with drafts on the device: the words, matched there
    tail: list[int] | None = None  # ... against the output's last tokens (a word's length back) and the drafts

    @property
    def penalizes(self) -> bool:
        return penalizes(self.params)


def penalizes(params: SamplingParams) -> bool:
    """Does the request penalize repetition (repetition, frequency or presence penalty)?"""
    return params.repetition_penalty != 1.0 or bool(params.frequency_penalty or params.presence_penalty)


def process_rows(logits: torch.Tensor, spans: list[RowSpan]) -> torch.Tensor:
    """logits [m, V] (the spans' rows, in order) -> processed [m, V] float32 (a new tensor), in this order: the
    guided mask, allowed_token_ids, bad words and min_tokens, logit_bias, the repetition, frequency and presence
    penalties, min_p."""
    x = logits.float().clone()
    _mask_rows(x, spans, lambda s: s.allowed, invert=True)
    _mask_rows(x, spans, lambda s: s.outside[None].expand(s.n, -1) if s.outside is not None else None)
    _set_pairs(x, spans)
    _ban_on_device(x, spans)
    if any(s.penalizes for s in spans):
        x = _penalized(x, spans)
    if any(_min_p(s) for s in spans):
        temperature = _per_row(spans, lambda s: s.params.temperature if _min_p(s) else 1.0, x.device)
        min_p = _per_row(spans, lambda s: s.params.min_p if _min_p(s) else 0.0, x.device)
        scaled = x / temperature  # p_i / p_max = exp(scaled_i - max)
        ratio = torch.exp(scaled - scaled.max(dim=-1, keepdim=True).values)
        x = x.masked_fill(ratio < min_p, NEG)  # the most likely token (ratio 1) always stays; min_p 0 drops none
    return x


def process_batch(logits: torch.Tensor, spans: list[RowSpan]) -> torch.Tensor:
    """process_rows for a round's sequences: on CUDA in one pass (the launches, not the bytes, cost there), on a CPU
    one pass per sequence (its [n, V] rows stay in cache: 16 sequences of 8 rows took 0.37 s in one pass against
    0.21 s apart on this 2-core machine, processing_ops_cpu_2026-12-05.json). The same bits either way."""
    if logits.is_cuda or len(spans) == 1:
        return process_rows(logits, spans)
    starts = [0]
    for s in spans:
        starts.append(starts[-1] + s.n)
    return torch.cat([process_rows(logits[a:b], [s]) for s, a, b in zip(spans, starts, starts[1:])])


def _min_p(span: RowSpan) -> bool:
    return span.params.min_p > 0.0 and not span.params.greedy


def _per_row(spans: list[RowSpan], value, device) -> torch.Tensor:
    """[m, 1] float32: value(span) on each of its rows."""
    return floats_to_device([value(s) for s in spans for _ in range(s.n)], device)[:, None]


def _mask_rows(x: torch.Tensor, spans: list[RowSpan], mask, invert: bool = False) -> None:
    """x[row, token] = -inf where the span's mask [n, V] holds (invert: where it does not)."""
    masks = [mask(s) for s in spans]
    if all(m is None for m in masks):
        return
    fill = torch.ones if invert else torch.zeros
    full = torch.cat([m if m is not None else fill(s.n, x.shape[1], dtype=torch.bool, device=x.device)
                      for s, m in zip(spans, masks)])  # [m, V]
    x.masked_fill_(~full if invert else full, NEG)


def _set_pairs(x: torch.Tensor, spans: list[RowSpan]) -> None:
    """Bad words and min_tokens' stop ids to -inf, then logit_bias added: one indexed write each."""
    rows, cols, bias_rows, bias_cols, bias = [], [], [], [], []
    start, vocab = 0, x.shape[1]
    for s in spans:
        for k, ids in enumerate(s.banned or ()):
            rows += [start + k] * len(ids)
            cols += ids
        held = [t for t in s.stop_ids if t < vocab]
        for k in range(min(s.n, s.early) if held else 0):
            rows += [start + k] * len(held)
            cols += held
        for k in range(s.n if s.params.logit_bias else 0):
            bias_rows += [start + k] * len(s.params.logit_bias)
            bias_cols += [t for t, _ in s.params.logit_bias]
            bias += [b for _, b in s.params.logit_bias]
        start += s.n
    if rows:
        x[to_device(rows, x.device), to_device(cols, x.device)] = NEG
    if bias:
        at = (to_device(bias_rows, x.device), to_device(bias_cols, x.device))
        x[at] += floats_to_device(bias, x.device)


def _ban_on_device(x: torch.Tensor, spans: list[RowSpan]) -> None:
    """Bad words (penalties.banned_rows' rule) for spans whose drafts are on the device: row k forbids a word's last
    token where its other tokens end the row's history (the tail, then drafts[:first + k]); no host read, one
    host->device copy per span (the pinned ring must not fill within a pass: staging.RING)."""
    start = 0
    for s in spans:
        if s.bad_words:
            _ban_span(x, s, start)
        start += s.n


def _ban_span(x: torch.Tensor, s: RowSpan, start: int) -> None:
    """_ban_on_device for one span: each (word, row) entry checks the word's other tokens at the row's history end;
    a (row, token) pair is banned when any of its entries matches (pairs are unique: no write races another)."""
    width = max(len(w) for w in s.bad_words) - 1  # the longest word's other tokens
    pairs: dict[tuple[int, int], int] = {}
    entries = []  # per (word, row): history positions [width], wanted tokens [width] (-1: none), valid, pair
    for w in s.bad_words:
        for k in range(s.n):
            end = len(s.tail) + s.first + k  # row k's history length
            at = [max(end - len(w) + 1 + j, 0) for j in range(len(w) - 1)] + [0] * (width + 1 - len(w))
            want = list(w[:-1]) + [-1] * (width + 1 - len(w))
            pair = pairs.setdefault((start + k, w[-1]), len(pairs))
            entries.append(at + want + [int(end >= len(w) - 1), pair])
    flat = to_device(list(s.tail) + [v for e in entries for v in e] + [r for r, _ in pairs] + [c for _, c in pairs],
                     x.device)
    tail, rest = flat[:len(s.tail)], flat[len(s.tail):]
    table = rest[:len(entries) * (2 * width + 2)].view(len(entries), 2 * width + 2)
    rows, cols = rest[table.numel():].view(2, len(pairs))
    history = torch.cat([tail, s.drafts.reshape(-1)[:s.first + s.n - 1]])
    if history.numel() == 0:
        history = torch.full((1,), -1, dtype=torch.long, device=x.device)  # (nothing before: only one-token words)
    want = table[:, width:2 * width]
    match = ((history[table[:, :width]] == want) | (want < 0)).all(-1) & (table[:, 2 * width] == 1)  # [entries]
    hits = torch.zeros(len(pairs), device=x.device).index_add_(0, table[:, 2 * width + 1], match.float())
    x[rows, cols] = torch.where(hits > 0, NEG, x[rows, cols])


def _penalized(x: torch.Tensor, spans: list[RowSpan]) -> torch.Tensor:
    """The repetition, frequency and presence penalties, with each row's counts (its output and drafts before it);
    a row whose span does not use one gets its neutral value (x / 1, x * 1, x - 0: the same bits)."""
    counts = _counts(spans, x.shape[1], x.device)  # [m, V]
    device = x.device
    if any(s.params.repetition_penalty != 1.0 for s in spans):
        rp = _per_row(spans, lambda s: s.params.repetition_penalty, device)
        seen = counts > 0
        if any(s.seen is not None for s in spans):
            seen |= torch.cat([s.seen[None].expand(s.n, -1) if s.seen is not None
                               else torch.zeros(s.n, x.shape[1], dtype=torch.bool, device=device) for s in spans])
        x = torch.where(seen, torch.where(x > 0, x / rp, x * rp), x)
    if any(s.params.frequency_penalty for s in spans):
        x = x - _per_row(spans, lambda s: s.params.frequency_penalty, device) * counts
    if any(s.params.presence_penalty for s in spans):
        x = x - _per_row(spans, lambda s: s.params.presence_penalty, device) * (counts > 0).float()
    return x


def _counts(spans: list[RowSpan], vocab: int, device) -> torch.Tensor:
    """[m, V] float32 (exact integers): each row's token counts, its output's plus the drafts before it."""
    base = torch.cat([(s.counts[None].expand(s.n, -1) if s.counts.dim() == 1 else s.counts)
                      if s.penalizes and s.counts is not None else torch.zeros(s.n, vocab, device=device)
                      for s in spans])  # [m, V] (a copy)
    rows, picks, drafts, start, offset = [], [], [], 0, 0
    for s in spans:
        if s.penalizes and len(s.drafts):
            for k in range(s.n):  # row k counts drafts 0 .. first + k - 1
                rows += [start + k] * (s.first + k)
                picks += range(offset, offset + s.first + k)
            d = s.drafts if isinstance(s.drafts, torch.Tensor) else to_device(list(s.drafts), device)
            drafts.append(d.reshape(-1))
            offset += drafts[-1].numel()
        start += s.n
    if rows:
        tokens = torch.cat(drafts).index_select(0, to_device(picks, device))
        base.index_put_((to_device(rows, device), tokens), torch.ones(len(rows), device=device),
                        accumulate=True)  # (integer sums: exact in any order)
    return base
