"""Paged KV cache tensors and the block manager that hands out pages to sequences."""
from __future__ import annotations

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
    """Free-list page allocator. A sequence reserves pages for the positions it will write."""

    def __init__(self, num_pages: int, page_size: int):
        self.page_size = page_size
        self.num_pages = num_pages
        self.free: list[int] = list(range(num_pages - 1, -1, -1))

    def pages_for(self, num_positions: int) -> int:
        return -(-num_positions // self.page_size)

    @property
    def num_free(self) -> int:
        return len(self.free)

    def can_reserve(self, table: list[int], num_positions: int) -> bool:
        return self.pages_for(num_positions) - len(table) <= len(self.free)

    def reserve(self, table: list[int], num_positions: int) -> None:
        """Grow `table` so positions 0..num_positions-1 have pages."""
        need = self.pages_for(num_positions) - len(table)
        if need > len(self.free):
            raise CapacityError(f"KV cache full: need {need} more pages, {len(self.free)} free")
        for _ in range(max(need, 0)):
            table.append(self.free.pop())

    def release(self, table: list[int]) -> None:
        self.free.extend(reversed(table))
        table.clear()
