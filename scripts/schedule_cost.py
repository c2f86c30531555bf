"""Host time of one Scheduler.schedule with 1 and 64 decoding sequences (CPU, no model; the best of 3 runs of 2000
steps, each step also appending a token to every sequence). usage: python scripts/schedule_cost.py [SCHEDULER_PY]
(default sparkdec/engine/scheduler.py; to compare with an older revision: git show REV:sparkdec/engine/scheduler.py >
/tmp/old.py, then pass /tmp/old.py)."""
from __future__ import annotations

import importlib.util
import sys
import time

from sparkdec.engine.kv_cache import BlockManager
from sparkdec.engine.sequence import Sequence
from sparkdec.sampling import SamplingParams


def load(path: str):
    spec = importlib.util.spec_from_file_location("scheduler_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def us_per_step(module, num_seqs: int, steps: int = 2000) -> float:
    sched = module.Scheduler(BlockManager(1_000_000, 16), 64, 1024, 8)
    for i in range(num_seqs):
        sched.add(Sequence(f"r{i}", list(range(1000)), SamplingParams(max_tokens=4000), 0, (), 40960))
    sched.schedule(8)
    for seq in sched.running:  # the prompt computed, the first token out: decoding
        seq.num_computed = 1000
        seq.output_ids.append(1)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(steps):
            for seq in sched.running:
                seq.output_ids.append(1)
                seq.num_computed += 1
            sched.schedule(8)
        best = min(best, (time.perf_counter() - t) / steps * 1e6)
    return best


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "sparkdec/engine/scheduler.py"
    module = load(path)
    for n in (1, 64):
        print(f"{path}: {n} sequences: {us_per_step(module, n):.1f} us per step")


if __name__ == "__main__":
    main()
