#!/usr/bin/env bash
# Device: wide GEMM tile sweep at M = 1 on the Qwen3-4B shapes, a quick bench with the swept table and with the
# shipped one, and an eager one-step profile with PDL off. usage (device tool): bash scripts/device_sweep_m1.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/tests
python scripts/sweep_gemm.py $OUT/sweep_m1.json --wide --m 1 --only 4b 2>&1 | grep -v Warn
python - <<'PY'
import json, os
out = os.environ["OUT"]
new = json.load(open(f"{out}/sweep_m1.json"))["configs"]
table = json.load(open("sparkdec/ops/gemm_configs.json"))
table["configs"].update(new)
json.dump(table, open(f"{out}/configs_swept.json", "w"), indent=1)
PY
SPARKDEC_GEMM_CONFIGS=$OUT/configs_swept.json python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim --out $OUT/bench_swept.json 2>&1 | grep "^qwen3"
python -m sparkdec bench kernels --shapes qwen3-4b --contexts 1024 --no-peer --no-sim --out $OUT/bench_base.json 2>&1 | grep "^qwen3"
SPARKDEC_PDL=0 python scripts/profile_step.py > $OUT/profile_nopdl.txt 2>&1; head -3 $OUT/profile_nopdl.txt
