#!/usr/bin/env bash
# run_attention_benchmarks.sh — records the attention benchmarks of bench/results on the visible GPU:
# the leaderboard case, the naive-vs-flash memory sweep and the causal scaling sweep, one results
# JSON each, named after the GPU (e.g. attention-scaling-h200.json).
#   bash bench/run_attention_benchmarks.sh [BUILD_DIR=build] [OUT_DIR=bench/results] [MAX_SECONDS=0.3]
set -euo pipefail
build=${1:-build}
out=${2:-bench/results}
max_seconds=${3:-0.3}
flashtrain="$build/bin/flashtrain"
[[ -x $flashtrain ]] || { echo "run_attention_benchmarks.sh: no $flashtrain; build first (cmake --preset cuda)" >&2; exit 2; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -oiE '[a-z][0-9]{2,4}' | head -n 1 | tr 'A-Z' 'a-z')
mkdir -p "$out"
"$flashtrain" bench attention --sweep leaderboard --json "$out/attention-leaderboard-$gpu.json"
"$flashtrain" bench attention --sweep memory --max-seconds "$max_seconds" --json "$out/attention-memory-$gpu.json"
"$flashtrain" bench attention --sweep scaling --max-seconds "$max_seconds" --json "$out/attention-scaling-$gpu.json"
