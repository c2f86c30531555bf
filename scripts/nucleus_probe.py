"""Device: the kernel sampler's launches (ops/triton_nucleus.py) by device time, for 1 and 8 rows of a 152k vocabulary,
in a few settings of its chunk, sub-tile, thresholds per pass and warps; and the torch sampler's total for scale.
usage: python scripts/nucleus_probe.py OUT.json"""
from __future__ import annotations

import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import sparkdec.ops.triton_nucleus as tn
from sparkdec import sampling
from sparkdec.sampling import STREAM_TARGET, SamplingParams, _mix

V, STEPS = 151936, 20


def device_us(fn) -> dict:
    """Kernel name -> device us per call of fn (mean over STEPS calls), and their sum."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            fn()
        torch.cuda.synchronize()
    rows = {e.key[:40]: round(e.device_time_total / STEPS, 2) for e in prof.key_averages() if e.device_time_total > 0}
    return {"per_call_us": rows, "total_us": round(sum(rows.values()), 1)}


def main(out: str) -> None:
    res = {"device": torch.cuda.get_device_name(), "vocab": V, "runs": {}}
    torch.manual_seed(0)
    for rows in (1, 8):
        x = torch.randn(rows, V, device="cuda") * 4
        keys = torch.tensor([_mix(7, 100 + i, STREAM_TARGET) for i in range(rows)], device="cuda")
        params = SamplingParams(temperature=0.8, top_p=0.95)
        sampling.KERNEL_SAMPLER = False
        res["runs"][f"torch_r{rows}"] = device_us(lambda: sampling._race_rows(x, params, keys.tolist()))
        for block, sub, nt, warps in ((1024, 128, 16, 4), (1024, 128, 32, 4), (1024, 128, 8, 4), (512, 128, 16, 4),
                                      (2048, 256, 16, 8)):
            tn.BLOCK, tn.SUB, tn.NT = block, sub, nt
            tn.PASSES = tn.passes_needed(tn.ONE_UP, nt)
            tn.NUM_WARPS = warps
            name = f"b{block}_s{sub}_t{nt}_w{warps}_r{rows}"
            res["runs"][name] = device_us(lambda: tn.race(x, 0.8, keys, 0.95))
            print(name, res["runs"][name], flush=True)
        tn.BLOCK, tn.SUB, tn.NT, tn.NUM_WARPS = 1024, 128, 16, 4
        tn.PASSES = tn.passes_needed()
        print(f"torch_r{rows}", res["runs"][f"torch_r{rows}"]["total_us"], flush=True)
    json.dump(res, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
