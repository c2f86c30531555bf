"""Prompt prefixes shared across requests: each full page of a prompt gets a key (a digest of the previous page's key
and its own tokens), and a request whose prompt begins with cached pages starts its prefill after them.

Only prompt rows are cached: they are computed by the same prompt path (the prefill kernel on CUDA) whatever the
chunking, so a request that reuses them reads the bits it would have computed itself (tests/test_prefix_cache.py).
Generated rows (decode and verify rows) are never shared."""
from __future__ import annotations

import hashlib
from array import array

from sparkdec.engine.sequence import Sequence


def page_keys(seq: Sequence, page_size: int) -> list[bytes]:
    """The keys of the prompt's full pages (computed once per sequence): a 128-bit BLAKE2b digest of the previous
    page's key and the page's token ids, so a key names the whole prefix (a crafted prompt cannot reach another's
    pages through a hash collision, as with Python's hash)."""
    if seq.page_keys is None:
        keys, parent = [], b""
        for i in range(len(seq.prompt_ids) // page_size):
            page = array("q", seq.prompt_ids[i * page_size:(i + 1) * page_size]).tobytes()
            parent = hashlib.blake2b(parent + page, digest_size=16).digest()
            keys.append(parent)
        seq.page_keys = keys
    return seq.page_keys


def reusable_keys(seq: Sequence, page_size: int) -> list[bytes]:
    """The keys a sequence may take from the cache: its prompt's full pages before the one holding the last prompt
    token (that row is computed: its logits give the first token), and none when the prompt's own
    log-probabilities are still to be computed (each prompt row's logits are needed)."""
    if seq.prompt_logprobs is not None and len(seq.prompt_logprobs) < len(seq.prompt_ids):
        return []
    return page_keys(seq, page_size)[:(len(seq.prompt_ids) - 1) // page_size]


def computed_prompt_pages(seq: Sequence, page_size: int) -> int:
    """How many of the prompt's full pages hold computed prompt rows."""
    return min(seq.num_computed, len(seq.prompt_ids)) // page_size
