"""A/B of spec/processed.DEVICE_PROCESSING on the device: `sparkdec bench kernels` (4B shape, ctx 1k, no peer, no
simulated rounds) with processed rows on the device (one read, one step ahead, chained propose) and after the read,
interleaved; writes each run's processed figures and the plain decode beside them.

usage: python scripts/ab_processing.py OUT.json [runs per setting, default 2]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

SETUP = "import sys, sparkdec.spec.processed as p; p.DEVICE_PROCESSING = sys.argv.pop(1) == 'on'; " \
        "from sparkdec.cli import main; main()"
KEYS = ("plain_decode_ms", "plain_processed_decode_ms", "spec_processed_ms_per_round", "spec_processed_tokens_per_round",
        "spec_sampled_ms_per_round", "verify_ms", "propose_ms")


def run(setting: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "k.json")
        subprocess.run([sys.executable, "-c", SETUP, setting, "bench", "kernels", "--shapes", "qwen3-4b",
                        "--contexts", "1024", "--no-peer", "--no-sim", "--out", out], check=True,
                       stdout=subprocess.DEVNULL)
        res = json.load(open(out))
    r = res["runs"][0]
    return {"setting": setting, "device": res["device"], "copy_bandwidth_Bps": res["copy_bandwidth_Bps"],
            **{k: r[k] for k in KEYS}}


def main() -> None:
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs = []
    for _ in range(n):
        for setting in ("off", "on"):
            runs.append(run(setting))
            r = runs[-1]
            print(f"{setting}: plain {r['plain_decode_ms']:.3f} ms/token, processed plain "
                  f"{r['plain_processed_decode_ms']:.3f} ms/token, spec {r['spec_processed_ms_per_round']:.3f} "
                  f"ms/round", flush=True)
    json.dump({"command": "python scripts/ab_processing.py OUT.json " + str(n),
               "commit": os.environ.get("SPARKDEC_COMMIT", ""), "runs": runs}, open(path, "w"), indent=1)


if __name__ == "__main__":
    main()
