#!/usr/bin/env bash
# run.sh — the main job on a fresh machine: install what is missing, configure (CUDA when nvcc is
# found), build the flashtrain CLI into build/, and run `flashtrain attention check` on a default
# configuration (bf16 on the GPU when one is visible, else fp32 on the CPU). Exit status: the
# check's (0 PASS, 1 FAIL, 2 error). The result is also written to build/attention_check.json.
#   bash scripts/run.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

bash "$FT_ROOT/scripts/install_deps.sh"
ft_configure
ft_build flashtrain
echo
"$FT_BIN" --version
echo

if ft_gpu_visible; then
  args=(--device cuda --dtype bf16 --batch 2 --heads 8 --kv-heads 2 --seqlen-q 1024 --head-dim 128 --causal)
else
  args=(--device cpu --dtype fp32 --batch 2 --heads 8 --kv-heads 2 --seqlen-q 512 --head-dim 64 --causal)
fi
echo "+ flashtrain attention check ${args[*]}"
"$FT_BIN" attention check "${args[@]}" --json "$FT_BUILD/attention_check.json"
