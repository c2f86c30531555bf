"""Device probe: how steady the bench's copy-bandwidth figure (the floor's denominator) is within one process: the bench's
measurement taken cold, again and again, then after a second of copies, and at other buffer sizes.

usage: python scripts/copy_bandwidth_probe.py OUT.json
"""
from __future__ import annotations

import json
import sys
import time

import torch

from sparkdec.bench.kernels import copy_bandwidth


def warm(seconds: float, nbytes: int = 2 << 30) -> None:
    x = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            y.copy_(x)
        torch.cuda.synchronize()


def main() -> None:
    out = {"device": torch.cuda.get_device_name(), "cold": [], "after_warm": [], "sizes": {}}
    for _ in range(3):
        out["cold"].append(copy_bandwidth())
    warm(1.0)
    for _ in range(5):
        out["after_warm"].append(copy_bandwidth())
    for size in (1 << 30, 4 << 30):
        out["sizes"][size] = copy_bandwidth(size)
    for key in ("cold", "after_warm"):
        print(key, " ".join(f"{b / 1e12:.3f}" for b in out[key]), "TB/s")
    print("sizes", {k: round(v / 1e12, 3) for k, v in out["sizes"].items()})
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
