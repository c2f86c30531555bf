"""Log-probabilities of committed tokens under the target's own distribution (log-softmax of its logits, before
temperature and filters), read from the logit rows the round already computed: a verify row's logits are the ones
plain decoding computes for that position, so speculation does not change them."""
from __future__ import annotations

import torch

from sparkdec.engine.runner import rows_tensor
from sparkdec.engine.sequence import Sequence


def token_logprobs(logits: torch.Tensor, tokens: list[int], top: int) -> list[tuple[int, float, tuple]]:
    """logits [n, V] of the rows that chose tokens[0..n-1] -> per token (its id, its log-probability, ((id,
    log-probability), ...) of the top most likely tokens, most likely first). One device->host read."""
    lp = torch.log_softmax(logits.float(), dim=-1)  # [n, V]
    ids = torch.tensor(tokens, device=lp.device)[:, None]  # [n, 1]
    parts = [lp.gather(1, ids)]  # [n, 1]
    if top:
        vals, idx = lp.topk(top, dim=-1)  # [n, top] each
        parts += [vals, idx.float()]  # NOTE: ids < 2**24 are exact in float32: one read for all
    host = torch.cat(parts, dim=1).tolist()  # [n, 1 + 2 * top]
    return [(t, row[0], tuple((int(i), v) for v, i in zip(row[1:1 + top], row[1 + top:])))
            for t, row in zip(tokens, host)]


class RoundScores:
    """The log-probabilities a round owes its sequences, computed together at its end: one log-softmax and one
    device->host read for all of them, however many sequences asked."""

    def __init__(self):
        self.items: list[tuple[list, torch.Tensor, list[int], int]] = []  # (entries to extend, rows, tokens, top)

    def output(self, seq: Sequence, logits, tokens: list[int]) -> None:
        """tokens: the sequence's newly committed ones; logits: their rows (a tensor or the runner's LogitRows)."""
        if seq.logprobs is not None and tokens:
            self.items.append((seq.logprobs, rows_tensor(logits)[:len(tokens)], tokens, seq.params.logprobs))

    def prompt(self, seq: Sequence, logits, lo: int, hi: int) -> None:
        """Prompt tokens lo + 1 .. hi, from the rows of positions lo .. hi - 1."""
        if hi > lo:
            self.items.append((seq.prompt_logprobs, rows_tensor(logits), seq.prompt_ids[lo + 1:hi + 1],
                               seq.params.prompt_logprobs))

    def flush(self) -> None:
        if not self.items:
            return
        top = max(k for *_, k in self.items)
        rows = torch.cat([r for _, r, _, _ in self.items])  # [N, V]: each row's result is its own
        entries = token_logprobs(rows, [t for _, _, ts, _ in self.items for t in ts], top)
        at = 0
        for out, _, ts, k in self.items:
            out += [(t, lp, alternatives[:k]) for t, lp, alternatives in entries[at:at + len(ts)]]
            at += len(ts)
        self.items = []


def prompt_rows(seq: Sequence, a: int, b: int) -> tuple[int, int]:
    """(lo, hi): the rows of positions lo .. hi - 1 of prompt chunk [a, b) score prompt tokens lo + 1 .. hi (row p
    predicts token p + 1; the prompt's last row predicts the first output token instead): those not scored yet (a
    prompt recomputed after a preemption is not scored twice); lo = hi when none are asked for."""
    if seq.prompt_logprobs is None:
        return a, a
    lo = max(a, len(seq.prompt_logprobs) - 1)
    return lo, max(lo, min(b, len(seq.prompt_ids) - 1))
