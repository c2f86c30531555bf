"""Where a speculative round's host time goes on a small, host-bound model (the shipped tiny pair, CUDA): tokens/s
and ms per round or step, the host's Python functions by own time (cProfile), and the CUDA runtime calls and torch
ops launched per round (torch.profiler), for plain decoding and for speculation every round (bypass off), and what a
CUDA graph's replay() call costs the host. Greedy by default; `sampled` draws at T 0.8, top-p 0.95 (seeded).
Usage: python scripts/round_host_profile.py OUT.json [device] [greedy|sampled]"""
from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from sparkdec import LLM, SamplingParams
from sparkdec.bench import provenance

CODE = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ", "class Stack:\n",
        "for key, value in items:\n"]
MAX_TOKENS = 256
ENGINES = {"plain": dict(draft=None, speculative=False), "spec": dict(spec_bypass=False)}
TOP = 40
SAMPLINGS = {"greedy": {}, "sampled": dict(temperature=0.8, top_p=0.95, seed=7)}
sampling: dict = {}  # the one main() runs


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def generate(llm, device: str) -> tuple[float, int, int]:
    """One request at a time over CODE: (seconds, tokens, rounds or steps)."""
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, **sampling)
    sync(device)
    t, tokens, rounds = time.perf_counter(), 0, 0
    for prompt in CODE:
        out = llm.generate([prompt], params)[0]
        tokens += len(out.token_ids)
        rounds += out.stats.get("rounds", 0) or len(out.token_ids)
    sync(device)
    return time.perf_counter() - t, tokens, rounds


def python_profile(llm, device: str) -> str:
    prof = cProfile.Profile()
    prof.enable()
    generate(llm, device)
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(TOP)
    stats.sort_stats("cumulative").print_stats(TOP)
    return text.getvalue()


def launch_profile(llm, device: str, rounds: int) -> dict:
    """Host-side op and runtime-call counts per round (or plain step), and their host time."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        generate(llm, device)
    rows = sorted(prof.key_averages(), key=lambda e: -e.count)
    return {e.key: {"per_round": e.count / rounds, "host_us_per_round": e.cpu_time_total / rounds}
            for e in rows[:TOP]}


def launch_costs(llm, device: str) -> dict:
    """Host us of each graph's replay() call (its median over a generate, in the engine's own flow) and how many
    replays it made, per graph (target tiers, the lone row's short graphs, propose tiers)."""
    runner = llm.engine.runner
    names = {id(g): f"target_{t}" for t, (g, _) in runner.graphs.graphs.items()}
    names.update({id(g): f"target_1_short_{b}" for b, g in runner.graphs.short.get(1, [])})
    if runner.propose_graphs is not None:
        names.update({id(g): f"propose_{t}" for t, (g, _) in runner.propose_graphs.graphs.items()})
    times: dict[str, list] = {}
    replay = torch.cuda.CUDAGraph.replay

    def timed(graph):
        t = time.perf_counter()
        replay(graph)
        times.setdefault(names.get(id(graph), "other"), []).append(time.perf_counter() - t)
    torch.cuda.CUDAGraph.replay = timed
    try:
        generate(llm, device)
    finally:
        torch.cuda.CUDAGraph.replay = replay
    return {name: {"replays": len(v), "host_us_median": 1e6 * sorted(v)[len(v) // 2]} for name, v in times.items()}


def main(out_path: str, device: str = "cuda", kind: str = "greedy") -> None:
    sampling.update(SAMPLINGS[kind])
    results = {}
    for name, kw in ENGINES.items():
        llm = LLM(device=device, max_num_seqs=1, **kw)
        generate(llm, device)  # warm-up (graphs, kernels)
        secs, tokens, rounds = min(generate(llm, device) for _ in range(3))
        row = {"tokens_per_s": tokens / secs, "rounds": rounds, "tokens_per_round": tokens / rounds,
               "ms_per_round": 1e3 * secs / rounds}
        print(f"{name}: {row}", flush=True)
        if device == "cuda":
            row["graph_launch"] = launch_costs(llm, device)
            print(f"  graph launches: {row['graph_launch']}", flush=True)
        row["launches"] = launch_profile(llm, device, rounds)
        row["python"] = python_profile(llm, device)
        print(row["python"][:6000], flush=True)
        for key, v in list(row["launches"].items())[:25]:
            print(f"  {key:50s} {v['per_round']:8.1f} per round, {v['host_us_per_round']:8.1f} us", flush=True)
        results[name] = row
        del llm
    record = {"device": torch.cuda.get_device_name() if device == "cuda" else "CPU", "date": time.strftime("%Y-%m-%d"),
              "commit": provenance.commit(), "command": " ".join(["python"] + sys.argv),
              "env": {k: v for k, v in os.environ.items() if k.startswith("SPARKDEC_")},
              "config": {"pair": "shipped tiny", "max_tokens": MAX_TOKENS, "prompts": CODE, "engines": ENGINES,
                         "sampling": sampling},
              "results": results}
    with open(out_path, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:])
