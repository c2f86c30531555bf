"""Rotary position embedding (default Qwen3 RoPE, rotate-half layout) from a precomputed table."""
from __future__ import annotations

import torch


class RotaryTable:
    """cos/sin for every position up to max_positions; indexed by absolute position."""

    def __init__(self, head_dim: int, theta: float, max_positions: int, device: torch.device | str = "cpu"):
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        t = torch.arange(max_positions, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)  # [P, D/2]
        emb = torch.cat([freqs, freqs], dim=-1)  # [P, D]
        self.cos = emb.cos().to(device)
        self.sin = emb.sin().to(device)

    def apply(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [T, H, D] rotated at positions [T]."""
        cos = self.cos[positions].unsqueeze(1).to(x.dtype)  # [T, 1, D]
        sin = self.sin[positions].unsqueeze(1).to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin
