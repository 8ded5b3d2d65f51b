#!/usr/bin/env bash
# test_config_mismatch.sh — ranks agree before they work (issue 36 item 1): mpirun MPMD jobs of 2 ranks
# started with one differing option each (issue 36's cases: --steps, --ddp-strategy, --size, --vocab,
# --context, --batch, --seed, --data, --zero). Each must end within 10 s, non-zero, before step 1, with
# every rank reporting "the ranks were started with different <option>: rank 0 has A, rank 1 has B".
# CTest label mpi.
#   bash tests/scripts/test_config_mismatch.sh build-cpu/bin/flashtrain mpirun
set -uo pipefail
flashtrain=$1
mpirun=${2:-mpirun}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
python3 -c "import sys; open(sys.argv[1], 'wb').write(bytes(range(97)) * 40)" "$work/a.bin"
python3 -c "import sys; open(sys.argv[1], 'wb').write(bytes(range(96, -1, -1)) * 40)" "$work/b.bin"

base=(train --device cpu --size tiny --batch 2 --steps 20 --log-interval 1)

# mismatch OPTION VALUE0 VALUE1 [EXPECTED]: rank 0 gets OPTION VALUE0, rank 1 OPTION VALUE1; both must
# report EXPECTED (default: the option and both values).
mismatch() {
  local option=$1 a=$2 b=$3
  local expected=${4:-"the ranks were started with different $option: rank 0 has $a, rank 1 has $b"}
  local name=${option#--}
  local start=$SECONDS
  timeout 60 "$mpirun" -np 1 "$flashtrain" "${base[@]}" "$option" "$a" : -np 1 "$flashtrain" "${base[@]}" "$option" "$b" \
    >"$work/$name.out" 2>"$work/$name.err"
  local status=$? elapsed=$((SECONDS - start)) ok=1
  if [[ $status -eq 0 || $status -eq 124 ]]; then echo "FAIL $option: exit status $status"; ok=0; fi
  if ((elapsed >= 10)); then echo "FAIL $option: took ${elapsed} s"; ok=0; fi
  local reports
  reports=$(grep -cF "$expected" "$work/$name.err")
  if ((reports < 2)); then echo "FAIL $option: $reports rank(s) reported '$expected', expected both"; ok=0; fi
  if grep -qE "^step +1/" "$work/$name.out"; then echo "FAIL $option: step 1 ran"; ok=0; fi
  if ((ok)); then
    echo "ok   $option: both ranks in ${elapsed} s: $(grep -m1 -F "$expected" "$work/$name.err")"
  else
    echo "---- stderr:"; cat "$work/$name.err"; echo "----"
    failures=$((failures + 1))
  fi
}

mismatch --steps 40 20
mismatch --ddp-strategy naive flat
mismatch --size tiny small
mismatch --vocab 97 98
mismatch --context 16 32
mismatch --batch 2 3
mismatch --seed 1 2
a_identity=$(python3 -c "import os,sys; print(os.path.getsize(sys.argv[1]))" "$work/a.bin")
mismatch --data "$work/a.bin" "$work/b.bin" \
  "the ranks were started with different --data: rank 0 has $a_identity bytes, first MiB fnv1a"
mismatch --zero owner_broadcast reduce_scatter

if ((failures > 0)); then exit 1; fi
echo "test_config_mismatch: 9 mismatches reported by both ranks before step 1"
