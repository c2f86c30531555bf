"""Device: the shipped tiny pair's tokens/s (plain and speculative, greedy and seeded sampled, batch 1) under two
code trees, alternated in fresh processes (A, B, A, B) so host-speed drift between runs cannot pose as a change.
usage: python scripts/ab_code_versions.py OUT.json ROOT_A ROOT_B   (a root holds a `sparkdec` package, e.g. one
unpacked with `git archive <commit> sparkdec | tar -x -C ROOT`)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

PAIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "sparkdec-tiny")
PROMPTS = ["def parse(line):\n", "import os\nimport sys\n\n\ndef main(argv):\n    ",
           "class Config:\n    def __init__(self, path):\n        ", "The standard library provides"]


def measure() -> dict:
    import torch

    from sparkdec import LLM, SamplingParams

    out = {}
    for spec in (False, True):
        llm = LLM(model=os.path.join(PAIR, "target"), draft=os.path.join(PAIR, "draft") if spec else None,
                  device="cuda", dtype="bfloat16", speculative=spec, spec_bypass=False)
        for kind in ("greedy", "sampled"):
            kw = dict(temperature=0.8, top_p=0.95) if kind == "sampled" else {}
            params = [SamplingParams(max_tokens=256, ignore_eos=True, seed=100 + i, **kw) for i in range(len(PROMPTS))]
            llm.generate(PROMPTS[:1], params[:1])  # warm-up
            tokens, secs, outs = 0, 0.0, []
            for p, q in zip(PROMPTS, params):
                torch.cuda.synchronize()
                t = time.perf_counter()
                o = llm.generate([p], q)[0]
                torch.cuda.synchronize()
                secs += time.perf_counter() - t
                tokens += len(o.token_ids)
                outs.append(o.token_ids)
            out[f"{'spec' if spec else 'plain'}_{kind}_tok_s"] = tokens / secs
            out[f"{'spec' if spec else 'plain'}_{kind}_tokens"] = outs
    return out


def main() -> None:
    path, roots = sys.argv[1], sys.argv[2:4]
    runs = []
    for i in range(4):
        root = roots[i % 2]
        env = dict(os.environ, PYTHONPATH=os.path.abspath(root))
        res = subprocess.run([sys.executable, __file__, "--measure"], env=env, capture_output=True, text=True)
        r = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else {"error": res.stderr[-2000:]}
        r["root"] = root
        runs.append(r)
        print(root, {k: round(v) for k, v in r.items() if k.endswith("tok_s")} or r.get("error"), flush=True)
    same = all(runs[i].get(k) == runs[0].get(k) for i in range(4) for k in runs[0] if k.endswith("_tokens"))
    print("identical tokens across trees:", same)
    with open(path, "w") as f:
        json.dump({"runs": [{k: v for k, v in r.items() if not k.endswith("_tokens")} for r in runs],
                   "identical_tokens": same}, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--measure"]:
        print(json.dumps(measure()))
    else:
        main()
