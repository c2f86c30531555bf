"""The keyed race noise of sampling.uniform_noise inside Triton kernels (splitmix64 in uint64, the same bits)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sparkdec.sampling import signed

GOLDEN, M1, M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def noise_args() -> tuple[int, int, int]:
    """(golden, m1, m2) as kernel arguments (int64: one argument type for every value)."""
    return signed(GOLDEN), signed(M1), signed(M2)


@triton.jit
def u64(x):
    """An integer argument's bits as uint64 (Triton passes small ints as int32: sign-extend first)."""
    return x.to(tl.int64).to(tl.uint64, bitcast=True)


@triton.jit
def splitmix(x, m1, m2):
    """splitmix64's finaliser on uint64 values (wrapping products, logical shifts)."""
    x = (x ^ (x >> 30)) * m1
    x = (x ^ (x >> 27)) * m2
    return x ^ (x >> 31)


@triton.jit
def keyed_log_exp(key_base, position, cols, golden, m1, m2):
    """-log E_i = -log(-log u_i) (float64) for vocabulary entries cols of the draw keyed on (key_base, position):
    key = sampling._mix(seed, position, stream), u_i = sampling.uniform_noise's element i. key_base and position
    broadcast against cols (scalars, or [R, 1] columns against [1, V] rows)."""
    m1u, m2u = u64(m1), u64(m2)
    key = splitmix(position.to(tl.uint64) * m1u + u64(key_base), m1u, m2u) & 0x7FFFFFFFFFFFFFFF
    return log_exp_of_key(key, cols, golden, m1, m2)


@triton.jit
def log_exp_of_key(key, cols, golden, m1, m2):
    """-log E_i (float64) for vocabulary entries cols of the draw with the mixed key sampling._mix(...) (uint64 or
    a non-negative int64)."""
    g, m1u, m2u = u64(golden), u64(m1), u64(m2)
    z = splitmix((cols + 1).to(tl.uint64) * g + key.to(tl.uint64), m1u, m2u)
    u = ((z >> 12).to(tl.float64) + 0.5) * 2.220446049250313e-16  # 52 bits + 1/2, times 2^-52: in (0, 1)
    return -tl.log(-tl.log(u))


@triton.jit
def _race_noise_kernel(key_ptr, temp_ptr, apos_ptr, g_ptr, V, GAMMA: tl.constexpr, golden, m1, m2,
                       BLOCK: tl.constexpr):
    """Row (b, k) of g [B, γ, V]: -log E of the target's draw at position apos[b] + k + 1, float32; rows of a
    sequence with temperature 0 (argmax drafts) are left alone."""
    row = tl.program_id(1)
    b = row // GAMMA
    if tl.load(temp_ptr + b) > 0:
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        pos = tl.load(apos_ptr + b) + row % GAMMA + 1
        log_e = keyed_log_exp(tl.load(key_ptr + b), pos, cols, golden, m1, m2)
        tl.store(g_ptr + row.to(tl.int64) * V + cols, log_e.to(tl.float32), mask=cols < V)


def race_noise(coupling, gamma: int, vocab: int, block: int = 1024):
    """coupling (key bases [B] int64, temperatures [B] float32, anchor positions [B] int64) -> g [B, γ, V] float32:
    each coupled sequence's race noise per draft slot (only the rows of sequences that couple are written)."""
    key, temp, apos = coupling
    g = torch.empty(key.shape[0], gamma, vocab, dtype=torch.float32, device=key.device)
    _race_noise_kernel[(triton.cdiv(vocab, block), key.shape[0] * gamma)](key, temp, apos, g, vocab, gamma,
                                                                          *noise_args(), BLOCK=block)
    return g
