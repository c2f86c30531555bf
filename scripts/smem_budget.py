"""Shared-memory budget of a lone row's attention window (Qwen3-4B, ctx 1k), a model computed on the CPU.

The Gluon kernels are compiled for sm_90 here (as tests/test_gluon_compile.py does) to read the shared memory each
program asks for; then, assuming the split's live programs spread one per SM, it counts how many o programs find room
beside them when qkv ends (the rest fill their rings only once split programs leave). A model of the block
scheduler, not a measurement: the device A/Bs (smem_ab_*, lone3_ab_*_session23.json) are the evidence.

usage: PYTHONPATH=tests python scripts/smem_budget.py
"""
from __future__ import annotations

SM_COUNT = 132
SM_BYTES = 228 * 1024  # shared memory per SM on sm_90 (a block may ask for 227 KB)
RESERVED = 1024  # the driver reserves 1 KB per resident block
O_PROGRAMS = 40 * 8  # o: 2560 / 64 tiles x split-K 8
LIVE_SPLITS = 16 * 8  # the Gluon split's programs holding keys at 1k: 16 splits of 64 keys x 8 kv heads


def split_bytes(iters: int, steps: int) -> int:
    from test_gluon_compile import compile_split

    return compile_split(3, iters, True, steps).metadata.shared


def o_bytes(stages: int) -> int:
    from test_gluon_compile import compile_gemv

    return compile_gemv(k=4096, split=8, residual=True, defer=True, stages=stages, pace=1).metadata.shared


def o_resident(split: int, o: int) -> int:
    """o programs with room at qkv's end: one live split program on each of LIVE_SPLITS SMs, none on the rest."""
    beside = (SM_BYTES - split - RESERVED) // (o + RESERVED)
    alone = SM_BYTES // (o + RESERVED)
    return min(O_PROGRAMS, LIVE_SPLITS * beside + (SM_COUNT - LIVE_SPLITS) * alone)


def main() -> None:
    splits = {"window-sized graph (16-split loop)": split_bytes(16, 2), "sized for 1280 keys": split_bytes(1, 2),
              "sized, one-step buffers": split_bytes(1, 1)}
    rings = {stages: o_bytes(stages) for stages in (4, 3, 2)}
    print(f"o program: " + ", ".join(f"{s} stages {b // 1024} KB" for s, b in rings.items()))
    for name, sb in splits.items():
        counts = ", ".join(f"{s} stages {o_resident(sb, ob)}" for s, ob in rings.items())
        print(f"split {sb // 1024} KB ({name}): o programs resident beside it of {O_PROGRAMS}: {counts}")


if __name__ == "__main__":
    main()
