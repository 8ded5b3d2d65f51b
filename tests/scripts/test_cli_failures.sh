#!/usr/bin/env bash
# test_cli_failures.sh — fail early, lose nothing (issue 36 item 4), on the flashtrain binary: numeric
# options refused at parse time (overflow, inf, nan, negative seeds); unwritable --json and
# --checkpoint-dir refused before the first step; stale checkpoint temporaries removed at start; a
# benchmark cell that exhausts host memory (naive attention at N = 65536) reported as an OOM row; the log
# of a killed run keeps every line written (line-buffered stdout into a file). CTest label cpu.
#   bash tests/scripts/test_cli_failures.sh build-cpu/bin/flashtrain
set -uo pipefail
flashtrain=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

tiny=(train --device cpu --size tiny --batch 2 --steps 3 --log-interval 1)

# refused NAME EXPECTED ARGS...: exit status 2 within 10 s, the message on stderr, no training step run.
refused() {
  local name=$1 expected=$2
  shift 2
  local start=$SECONDS
  timeout 60 "$flashtrain" "$@" >"$work/out" 2>"$work/err"
  local status=$?
  if [[ $status -ne 2 ]]; then fail "$name: exit status $status, expected 2"; return; fi
  if ((SECONDS - start >= 10)); then fail "$name: took $((SECONDS - start)) s"; fi
  grep -qF -- "$expected" "$work/err" || { fail "$name: stderr lacks '$expected':"; cat "$work/err"; }
  if grep -qE "^step +1/" "$work/out"; then fail "$name: a training step ran before the error"; fi
  echo "ok   $name: $(cat "$work/err")"
}

refused steps_overflow "--steps: expected an integer, given '99999999999999999999'" \
  "${tiny[@]}" --steps 99999999999999999999
refused lr_inf "--lr: expected a finite number, given 'inf'" "${tiny[@]}" --lr inf
refused seed_negative "--seed: expected a whole number in [0, 2^64), given '-1'" "${tiny[@]}" --seed -1
refused max_seconds_nan "--max-seconds: expected a finite number, given 'nan'" bench attention --max-seconds nan
refused timeout_zero "--timeout: expected a finite number of seconds > 0" "${tiny[@]}" --timeout 0
touch "$work/a_file"
refused json_under_a_file "--json $work/a_file/runs/train.json: $work/a_file is not a folder" \
  "${tiny[@]}" --json "$work/a_file/runs/train.json"
refused json_unwritable "--json /proc/flashtrain/train.json: cannot create files in /proc" \
  "${tiny[@]}" --json /proc/flashtrain/train.json
refused json_is_folder "it is a folder, expected a file path" "${tiny[@]}" --json "$work"
refused checkpoint_dir_is_file "--checkpoint-dir $work/a_file: cannot create the folder" \
  "${tiny[@]}" --checkpoint-dir "$work/a_file"
refused checkpoint_dir_unwritable "--checkpoint-dir /proc/flashtrain-ckpt: cannot create the folder" \
  "${tiny[@]}" --checkpoint-dir /proc/flashtrain-ckpt
refused bench_json_unwritable "--json /proc/flashtrain/model.json: cannot create files in /proc" \
  bench model --size tiny --device cpu --json /proc/flashtrain/model.json
refused bench_gemm_on_cpu "bench gemm times cuBLASLt: --device must be cuda or cuda:N, given cpu" \
  bench gemm --device cpu
refused bench_gemm_unknown_problem "unknown problem 'w9.fwd'" bench gemm --problems w2.dw,w9.fwd --device cpu

# Stale temporaries of an interrupted checkpoint write are removed before training.
mkdir -p "$work/ckpt"
touch "$work/ckpt/step_000002.safetensors.tmp-4242-0" "$work/ckpt/latest.tmp"
if timeout 300 "$flashtrain" "${tiny[@]}" --checkpoint-dir "$work/ckpt" >"$work/out" 2>&1; then
  grep -qF "removed 2 temporary file(s)" "$work/out" || fail "stale_tmp: no note of the removal"
  if ls "$work/ckpt" | grep -q tmp; then fail "stale_tmp: temporaries remain: $(ls "$work/ckpt")"; fi
  [[ -e "$work/ckpt/step_000003.safetensors" ]] || fail "stale_tmp: no checkpoint written"
  echo "ok   stale_tmp: $(ls "$work/ckpt" | tr '\n' ' ')"
else
  fail "stale_tmp: the run failed"; cat "$work/out"
fi

# A cell that exhausts host memory is an OOM row (std::bad_alloc; at most 16 GB of address space).
if (ulimit -v 16000000; timeout 300 "$flashtrain" bench attention --impl naive --seqlen 65536 --device cpu \
      --dtype fp32 --json "$work/oom.json" >"$work/out" 2>&1); then
  if python3 -c "import json, sys; rows = json.load(open(sys.argv[1]))['rows']; sys.exit(not (len(rows) == 1 and rows[0].get('oom') is True))" "$work/oom.json"; then
    echo "ok   naive_65536_oom: $(grep -o '"error": *"[^"]*"' "$work/oom.json" || grep -o 'out of host memory[^"]*' "$work/oom.json")"
  else
    fail "naive_65536_oom: no OOM row in $(cat "$work/oom.json")"
  fi
else
  fail "naive_65536_oom: the benchmark failed:"; cat "$work/out"
fi

# The log of a killed run keeps what was written: stdout into a file is line-buffered.
"$flashtrain" "${tiny[@]}" --steps 100000 >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -qE "^step +1/" "$work/log" && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if grep -qE "^step +1/" "$work/log"; then
  echo "ok   killed_log: the step-1 line was in the file before kill -9"
else
  fail "killed_log: the log of the killed run lacks the step-1 line:"; cat "$work/log"
fi

if ((failures > 0)); then echo "test_cli_failures: $failures failure(s)"; exit 1; fi
echo "test_cli_failures: all cases passed"
