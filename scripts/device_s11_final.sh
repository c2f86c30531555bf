#!/usr/bin/env bash
# Device, session 11 end run: the GPU tests and the 4B kernel bench, as session 10's end run (device_s10h.sh).
# usage (device tool): SPARKDEC_COMMIT=<hash> bash scripts/device_s11_final.sh   (~5 minutes)
exec bash "$(dirname "$0")/device_s10h.sh" "$@"
