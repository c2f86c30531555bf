"""Paged KV cache tensors and the block manager that hands out pages to sequences."""
from __future__ import annotations

from collections import OrderedDict

import torch

from sparkdec.errors import CapacityError


class KVCache:
    """Per layer a (k, v) pair of [num_pages * page_size, H_kv, head_dim] tensors, addressed by slot."""

    def __init__(self, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device):
        shape = (num_pages * page_size, num_kv_heads, head_dim)
        self.layers = [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
                       for _ in range(num_layers)]
        self.page_size = page_size
        self.num_pages = num_pages

    @staticmethod
    def bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


class BlockManager:
    """Page allocator with reference counts. A sequence reserves pages for the positions it will write. A page that
    holds a registered prompt prefix (its key: engine/prefix_cache.py) stays cached when its last holder releases
    it, and is taken back, least recently used first, only when no empty page is left."""

    def __init__(self, num_pages: int, page_size: int):
        self.page_size = page_size
        self.num_pages = num_pages
        self.free: list[int] = list(range(num_pages - 1, -1, -1))  # pages holding nothing
        self.refs = [0] * num_pages  # tables holding each page
        self.idle: OrderedDict[int, None] = OrderedDict()  # cached pages no table holds, least recently used first
        self.key_of: dict[int, bytes] = {}  # cached page -> its prefix key
        self.page_of: dict[bytes, int] = {}  # prefix key -> cached page

    def pages_for(self, num_positions: int) -> int:
        return -(-num_positions // self.page_size)

    @property
    def num_free(self) -> int:
        """Pages a reservation may take: empty ones and cached ones no table holds."""
        return len(self.free) + len(self.idle)

    def can_reserve(self, table: list[int], num_positions: int) -> bool:
        return self.pages_for(num_positions) - len(table) <= self.num_free

    def reserve(self, table: list[int], num_positions: int) -> None:
        """Grow `table` so positions 0..num_positions-1 have pages."""
        need = self.pages_for(num_positions) - len(table)
        if need > self.num_free:
            raise CapacityError(f"KV cache full: need {need} more pages, {self.num_free} free")
        for _ in range(max(need, 0)):
            table.append(self._take())

    def _take(self) -> int:
        if self.free:
            page = self.free.pop()
        else:  # the least recently used cached page forgets its prefix
            page, _ = self.idle.popitem(last=False)
            del self.page_of[self.key_of.pop(page)]
        self.refs[page] = 1
        return page

    def release(self, table: list[int]) -> None:
        for page in reversed(table):
            self.refs[page] -= 1
            if self.refs[page] == 0:
                if page in self.key_of:
                    self.idle[page] = None
                else:
                    self.free.append(page)
        table.clear()

    # ---- prefix cache ----
    def cached_pages(self, keys: list[bytes]) -> list[int]:
        """The pages of the longest run of keys, from the first, that are cached."""
        pages = []
        for key in keys:
            page = self.page_of.get(key)
            if page is None:
                break
            pages.append(page)
        return pages

    def share(self, table: list[int], pages: list[int]) -> None:
        """Append cached pages to a table (their contents are the table's first positions)."""
        for page in pages:
            if self.refs[page] == 0:
                del self.idle[page]
            self.refs[page] += 1
            table.append(page)

    def register(self, page: int, key: bytes) -> None:
        """Mark a held page as holding the prefix `key` (a page with the same key cached already wins)."""
        if key not in self.page_of and page not in self.key_of:
            self.page_of[key] = page
            self.key_of[page] = key
