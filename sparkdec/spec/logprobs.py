"""Log-probabilities of committed tokens under the target's own distribution (log-softmax of its logits, before
temperature and filters), read from the logit rows the round already computed: a verify row's logits are the ones
plain decoding computes for that position, so speculation does not change them."""
from __future__ import annotations

import torch

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


def record(seq: Sequence, logits, tokens: list[int]) -> None:
    """Append the log-probabilities of tokens, the sequence's newly committed ones, when it asked for them.
    logits: their rows, a tensor or the runner's LogitRows."""
    if seq.logprobs is not None and tokens:
        seq.logprobs += token_logprobs(_tensor(logits)[:len(tokens)], tokens, seq.params.logprobs)


def prompt_rows(seq: Sequence, a: int, b: int) -> tuple[int, int]:
    """(lo, hi): the rows of positions lo .. hi - 1 of prompt chunk [a, b) score prompt tokens lo + 1 .. hi (row p
    predicts token p + 1; the prompt's last row predicts the first output token instead): those not scored yet (a
    prompt recomputed after a preemption is not scored twice); lo = hi when none are asked for."""
    if seq.prompt_logprobs is None:
        return a, a
    lo = max(a, len(seq.prompt_logprobs) - 1)
    return lo, max(lo, min(b, len(seq.prompt_ids) - 1))


def record_prompt(seq: Sequence, logits, lo: int, hi: int) -> None:
    """Append the log-probabilities of prompt tokens lo + 1 .. hi from the rows of positions lo .. hi - 1."""
    if hi > lo:
        seq.prompt_logprobs += token_logprobs(_tensor(logits), seq.prompt_ids[lo + 1:hi + 1],
                                              seq.params.prompt_logprobs)


def _tensor(logits) -> torch.Tensor:
    return logits.tensor() if hasattr(logits, "tensor") else logits
