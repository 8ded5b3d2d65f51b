#!/usr/bin/env bash
# run_multigpu_benchmarks.sh — records the data-parallel benchmarks of bench/results on a machine with
# at least 2 GPUs: the all-reduce benchmark (NCCL over the GPUs at 2 ranks; MPI over host buffers at
# 2, 4 and 6 ranks), the DDP strategies (fp32 and bf16 gradient communication) and the ZeRO-1 accounting
# for xl, ctx 512, local batch 2, bf16.
# One results JSON each, named after the GPU and the world (e.g. ddp-xl-h200x2.json).
#   bash bench/run_multigpu_benchmarks.sh [BUILD_DIR=build] [OUT_DIR=bench/results] [WORLD=2]
set -euo pipefail
build=${1:-build}
out=${2:-bench/results}
world=${3:-2}
flashtrain="$build/bin/flashtrain"
[[ -x $flashtrain ]] || { echo "run_multigpu_benchmarks.sh: no $flashtrain; build first (cmake --preset cuda)" >&2; exit 2; }
gpus=$(nvidia-smi -L | wc -l)
(( gpus >= world )) || { echo "run_multigpu_benchmarks.sh: $world ranks need $world GPUs, this machine has $gpus" >&2; exit 2; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -oiE '[a-z][0-9]{2,4}' | head -n 1 | tr 'A-Z' 'a-z')
# NVLink multicast (NVLS) stays off on the lent machines; root may launch; host ranks may share cores.
launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0 -x LD_LIBRARY_PATH)
mkdir -p "$out"
"${launch[@]}" -np "$world" "$flashtrain" bench comm --backend nccl --json "$out/comm-nccl-${gpu}x${world}.json"
for ranks in 2 4 6; do
  "${launch[@]}" -np "$ranks" "$flashtrain" bench comm --backend mpi --json "$out/comm-mpi-${ranks}ranks-${gpu}host.json"
done
"${launch[@]}" -np "$world" "$flashtrain" bench ddp --size xl --context 512 --batch 2 --precision bf16 \
  --strategy single,naive,flat,overlapped,bucketed --bucket-mb 1,10,100,1000 --json "$out/ddp-xl-${gpu}x${world}.json"
"${launch[@]}" -np "$world" "$flashtrain" bench ddp --size xl --context 512 --batch 2 --precision bf16 \
  --strategy single,overlapped,bucketed --bucket-mb 25,100,1000 --bf16-comm --json "$out/ddp-xl-bf16comm-${gpu}x${world}.json"
"${launch[@]}" -np "$world" "$flashtrain" bench zero --size xl --context 512 --batch 2 --precision bf16 \
  --json "$out/zero-xl-${gpu}x${world}.json"
