"""Prompt prefixes shared across requests: each full page of a prompt gets a key (the previous page's key hash and
its own tokens), and a request whose prompt begins with cached pages starts its prefill after them.

Only prompt rows are cached: they are computed by the same prompt path (the prefill kernel on CUDA) whatever the
chunking, so a request that reuses them reads the bits it would have computed itself (tests/test_prefix_cache.py).
Generated rows (decode and verify rows) are never shared."""
from __future__ import annotations

from sparkdec.engine.sequence import Sequence


def page_keys(seq: Sequence, page_size: int) -> list[tuple]:
    """The keys of the prompt's full pages (computed once per sequence)."""
    if seq.page_keys is None:
        keys, parent = [], None
        for i in range(len(seq.prompt_ids) // page_size):
            key = (parent, tuple(seq.prompt_ids[i * page_size:(i + 1) * page_size]))
            keys.append(key)
            parent = hash(key)
        seq.page_keys = keys
    return seq.page_keys


def reusable_keys(seq: Sequence, page_size: int) -> list[tuple]:
    """The keys a sequence may take from the cache: its prompt's full pages before the one holding the last prompt
    token (that row is computed: its logits give the first token), and none when the prompt's own
    log-probabilities are still to be computed (each prompt row's logits are needed)."""
    if seq.prompt_logprobs is not None and len(seq.prompt_logprobs) < len(seq.prompt_ids):
        return []
    return page_keys(seq, page_size)[:(len(seq.prompt_ids) - 1) // page_size]


def computed_prompt_pages(seq: Sequence, page_size: int) -> int:
    """How many of the prompt's full pages hold computed prompt rows."""
    return min(seq.num_computed, len(seq.prompt_ids)) // page_size
