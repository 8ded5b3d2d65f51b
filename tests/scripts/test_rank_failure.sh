#!/usr/bin/env bash
# test_rank_failure.sh — one rank's failure ends the whole job at once with that rank's message (issue 36
# item 2): mpirun jobs of 2 ranks where only one rank fails (train: rank 0, the one that writes --json,
# finds it unwritable while rank 1 waits in a collective; bench ddp and bench zero, MPMD: rank 1 is given a
# device this build lacks). Every rank must exit within 10 s, non-zero, with "rank R of 2: <the error>"
# on stderr. And a stopped peer: rank 1 gets SIGSTOP mid-training, rank 0 ends the job after --timeout 3.
# (Options that differ between ranks are test_config_mismatch.sh's.) CTest label mpi.
#   bash tests/scripts/test_rank_failure.sh build-cpu/bin/flashtrain mpirun
set -uo pipefail
flashtrain=$1
mpirun=${2:-mpirun}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# job NAME EXPECTED_MESSAGE -- RANK0_ARGS... -- RANK1_ARGS...
job() {
  local name=$1 expected=$2
  shift 3
  local rank0=() rank1=()
  while [[ $1 != -- ]]; do rank0+=("$1"); shift; done
  shift
  rank1=("$@")
  local start=$SECONDS
  timeout 60 "$mpirun" -np 1 "$flashtrain" "${rank0[@]}" : -np 1 "$flashtrain" "${rank1[@]}" \
    >"$work/$name.out" 2>"$work/$name.err"
  local status=$? elapsed=$((SECONDS - start))
  local ok=1
  if [[ $status -eq 0 || $status -eq 124 ]]; then echo "FAIL $name: exit status $status"; ok=0; fi
  if ((elapsed >= 10)); then echo "FAIL $name: the job took ${elapsed} s (limit 10 s)"; ok=0; fi
  if ! grep -qF "flashtrain: error: $expected" "$work/$name.err"; then
    echo "FAIL $name: stderr lacks '$expected'"
    ok=0
  fi
  if ((ok)); then
    echo "ok   $name: ended in ${elapsed} s, status $status: $(grep -F "$expected" "$work/$name.err")"
  else
    echo "---- stderr:"; cat "$work/$name.err"; echo "----"
    failures=$((failures + 1))
  fi
}

tiny=(--device cpu --size tiny --batch 2 --steps 50 --json /proc/flashtrain/train.json)
job train_json "rank 0 of 2: --json /proc/flashtrain/train.json: cannot create files in /proc" \
  -- train "${tiny[@]}" -- train "${tiny[@]}"
bench=(--size tiny --batch 1 --warmup 1 --steps 2 --context 16)
job bench_ddp_device "rank 1 of 2: --device: rank 1 is local rank 1 of 2" -- bench ddp "${bench[@]}" --device cpu -- bench ddp "${bench[@]}" --device cuda
job bench_zero_device "rank 1 of 2: --device: rank 1 is local rank 1 of 2" -- bench zero "${bench[@]}" --device cpu -- bench zero "${bench[@]}" --device cuda

# A peer stopped (SIGSTOP) 4 s into training: rank 0 gives up after --timeout 3 and ends the job.
stuck=(train --device cpu --size tiny --batch 2 --steps 100000 --log-interval 100 --timeout 3)
start=$SECONDS
timeout 60 "$mpirun" -np 1 "$flashtrain" "${stuck[@]}" : -np 1 bash -c '(sleep 4; kill -STOP $$) & exec "$@"' \
  rank1 "$flashtrain" "${stuck[@]}" >"$work/stuck.out" 2>"$work/stuck.err"
status=$?
elapsed=$((SECONDS - start))
expected="on rank 0 of 2 did not complete within the 3 s timeout"
if [[ $status -eq 0 || $status -eq 124 ]] || ((elapsed >= 15)) || ! grep -qF "$expected" "$work/stuck.err"; then
  echo "FAIL stopped_peer: status $status after ${elapsed} s (limit 15 s: 4 s + the 3 s timeout), expected '$expected'"
  cat "$work/stuck.err"
  failures=$((failures + 1))
else
  echo "ok   stopped_peer: ended in ${elapsed} s, status $status: $(grep -m1 -F "$expected" "$work/stuck.err")"
fi

if ((failures > 0)); then exit 1; fi
echo "test_rank_failure: 4 jobs ended promptly with the failing rank's message"
