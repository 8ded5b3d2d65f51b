#!/usr/bin/env bash
# test.sh — the test command: install what is missing, configure and build everything into build/
# (the CUDA sources too, compiled only, when nvcc is found), then run the test suites: CTest labels
# cpu and mpi, the Python tests (tests/python) when there are any, a program built against the
# installed package (examples/consumer), and label gpu when a GPU is visible. Every suite runs even
# when an earlier one fails; a summary closes the output and the exit status is non-zero when any
# suite failed. When clang with libFuzzer is available, the file readers' fuzz targets are built into
# build-fuzz/ and run (CTest label fuzz: the seed corpora, then FT_FUZZ_SECONDS, default 30, of fuzzing
# per target).
#   bash scripts/test.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# mpirun refuses root unless told, and the CI machine has fewer cores than some tests have ranks.
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1
export CTEST_OUTPUT_ON_FAILURE=1

start=$SECONDS
bash "$FT_ROOT/scripts/install_deps.sh" || exit 1
ft_configure || { echo "test.sh: configure failed"; exit 1; }
ft_build || { echo "test.sh: build failed"; exit 1; }
echo "test.sh: built in $((SECONDS - start)) s"

log_dir="$FT_BUILD/test-logs"
mkdir -p "$log_dir"
summary=()
total_passed=0
total_failed=0
any_failed=0

# record NAME STATUS LOG: counts from the runner's closing line; a failed run with no count is one failure.
record() {
  local name=$1 status=$2 log=$3 passed=0 failed=0 line
  if line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -n 1); then
    local total
    total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
    failed=$(sed -E 's/.*passed, ([0-9]+) tests? failed.*/\1/' <<<"$line")
    passed=$((total - failed))
  elif line=$(grep -E "[0-9]+ (passed|failed|errors?)\b.* in [0-9.]+s" "$log" | tail -n 1); then
    passed=$(grep -oE "[0-9]+ passed" <<<"$line" | grep -oE "[0-9]+" || echo 0)
    failed=$(( $(grep -oE "[0-9]+ failed" <<<"$line" | grep -oE "[0-9]+" || echo 0) +
               $(grep -oE "[0-9]+ errors?" <<<"$line" | grep -oE "[0-9]+" || echo 0) ))
  fi
  if [[ $status -ne 0 && $failed -eq 0 ]]; then failed=1; fi
  total_passed=$((total_passed + passed))
  total_failed=$((total_failed + failed))
  if [[ $status -eq 0 && $passed -eq 0 ]]; then
    summary+=("$(printf '  %-14s %s' "$name" "no tests")")
    return
  fi
  local verdict=ok
  if [[ $status -ne 0 ]]; then verdict=FAILED; any_failed=1; fi
  summary+=("$(printf '  %-14s %-7s %4d passed, %d failed' "$name" "$verdict" "$passed" "$failed")")
}

# run_ctest LABEL [ctest args...]
run_ctest() {
  local label=$1
  shift
  echo
  echo "== ctest -L $label"
  local log="$log_dir/ctest-$label.log"
  ctest --test-dir "$FT_BUILD" -L "$label" --no-tests=ignore --timeout 900 "$@" 2>&1 | tee "$log"
  record "ctest $label" "${PIPESTATUS[0]}" "$log"
}

run_ctest cpu  # one at a time: the OpenMP tests use every core themselves
run_ctest mpi  # one test at a time: each already spreads over several ranks

python_tests="$FT_ROOT/tests/python"
if [[ -d "$python_tests" ]]; then
  echo
  echo "== pytest $python_tests"
  log="$log_dir/pytest.log"
  PYTHONPATH="$FT_BUILD/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q "$python_tests" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  if [[ $status -eq 5 ]]; then
    summary+=("$(printf '  %-14s %s' pytest "no tests collected")")
  else
    record pytest "$status" "$log"
  fi
else
  summary+=("$(printf '  %-14s %s' pytest "skipped (no tests/python)")")
fi

# The installed package: build/ installed into build/install, then examples/consumer configured, built
# and run against it (find_package(flashtrain), flashtrain::flashtrain).
echo
echo "== examples/consumer against the installed package"
log="$log_dir/consumer.log"
{ cmake --install "$FT_BUILD" --prefix "$FT_BUILD/install" --component library &&
  cmake -S "$FT_ROOT/examples/consumer" -B "$FT_BUILD/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$FT_BUILD/install" &&
  cmake --build "$FT_BUILD/consumer" && "$FT_BUILD/consumer/consumer"; } 2>&1 | tee "$log"
if [[ ${PIPESTATUS[0]} -eq 0 ]]; then
  summary+=("$(printf '  %-14s %s' consumer "ok (built and ran against build/install)")")
  total_passed=$((total_passed + 1))
else
  summary+=("$(printf '  %-14s %s' consumer "FAILED (see $log)")")
  total_failed=$((total_failed + 1))
  any_failed=1
fi

# The fuzz suite: only where clang can link a libFuzzer target.
if echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
   clang++ -fsanitize=fuzzer -x c++ - -o /dev/null >/dev/null 2>&1; then
  fuzz_build="$FT_ROOT/build-fuzz"
  echo
  echo "== fuzz targets (clang, libFuzzer) in $fuzz_build"
  if CXX=clang++ CC=clang cmake -S "$FT_ROOT" -B "$fuzz_build" -G Ninja -DFT_FUZZ=ON -DFT_CUDA=OFF \
       -DFT_BUILD_TESTS=OFF -DFT_BUILD_PYTHON=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON \
       -DFT_FUZZ_SECONDS="${FT_FUZZ_SECONDS:-30}" >"$log_dir/fuzz-configure.log" 2>&1 &&
     cmake --build "$fuzz_build" -j "${FT_JOBS:-$(nproc)}" --target fuzz_all >"$log_dir/fuzz-build.log" 2>&1; then
    FT_BUILD="$fuzz_build" run_ctest fuzz
  else
    echo "fuzz targets failed to configure or build: see $log_dir/fuzz-*.log"
    summary+=("$(printf '  %-14s %s' "ctest fuzz" "FAILED (build)")")
    any_failed=1
  fi
else
  summary+=("$(printf '  %-14s %s' "ctest fuzz" "skipped (no clang with libFuzzer: apt-get install clang)")")
fi

if ft_gpu_visible; then
  run_ctest gpu
else
  summary+=("$(printf '  %-14s %s' "ctest gpu" "skipped (no CUDA device visible to this build)")")
fi

echo
echo "test.sh summary ($((SECONDS - start)) s in all):"
printf '%s\n' "${summary[@]}"
echo "build tree: $(du -sh "$FT_BUILD" | cut -f1) in $FT_BUILD"  # CI's disk is small: Note [Fatbinary size]
echo "summary: $total_passed passed, $total_failed failed"
exit "$any_failed"
