#!/usr/bin/env bash
# test_install_deps.sh — scripts/install_deps.sh on fresh machines, faked: PATH holds this machine's tools
# without cmake, ninja, apt-get, id and c++, and shims in their place (a cmake of a chosen version or
# none, ninja or none, an apt-get and a pip that record what they are asked and can be offline, an id
# that can say non-root, a c++ that can lack the CLI11 headers until apt-get installs them). Each case
# checks the exit status, what was installed from where, and what the user is told. CTest label cpu.
#   bash tests/scripts/test_install_deps.sh
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# ---- this machine's tools, minus the shimmed ones -------------------------------------------------------
mkdir -p "$work/system"
IFS=: read -r -a path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}" /usr/bin /bin; do
  [[ -d "$dir" ]] || continue
  for tool in "$dir"/*; do
    name=${tool##*/}
    case "$name" in cmake | ninja | apt-get | id | c++ | python3 | pip | pip3) continue ;; esac
    [[ -x "$tool" && ! -e "$work/system/$name" ]] && ln -s "$tool" "$work/system/$name"
  done
done
real_python=$(python3 -c 'import sys; print(sys.executable)')
real_cxx=$(command -v c++)
real_id=$(command -v id)

# ---- shims ----------------------------------------------------------------------------------------------
mkdir -p "$work/shims"
cat >"$work/shims/apt-get" <<'SHIM'
#!/usr/bin/env bash
echo "apt-get $*" >>"$FAKE_LOG"
[[ "$1" == update && "${FAKE_OFFLINE:-0}" == 1 ]] && exit 100
if [[ "$1" == install ]]; then
  for arg in "$@"; do [[ "$arg" == -* || "$arg" == install ]] || touch "$FAKE_STATE/installed_$arg"; done
fi
exit 0
SHIM
cat >"$work/shims/id" <<SHIM
#!/usr/bin/env bash
if [[ "\$1" == -u ]]; then echo "\${FAKE_UID:-0}"; else exec "$real_id" "\$@"; fi
SHIM
cat >"$work/shims/c++" <<SHIM
#!/usr/bin/env bash
# Lacks CLI/CLI.hpp while FAKE_NO_CLI11=1 and apt-get has not installed libcli11-dev.
source=\$(cat)
if [[ "\${FAKE_NO_CLI11:-0}" == 1 && ! -e "\$FAKE_STATE/installed_libcli11-dev" && "\$source" == *CLI/CLI.hpp* ]]; then
  echo "fatal error: CLI/CLI.hpp: No such file or directory" >&2
  exit 1
fi
printf '%s\n' "\$source" | exec "$real_cxx" "\$@"
SHIM
cat >"$work/shims/python3" <<SHIM
#!/usr/bin/env bash
# pip install of cmake/ninja puts fakes of a current version into FT_PIP_SCRIPTS_DIR (or fails offline).
if [[ "\$1" == -m && "\$2" == pip && "\$3" == install ]]; then
  echo "pip \$*" >>"\$FAKE_LOG"
  [[ "\${FAKE_OFFLINE:-0}" == 1 ]] && exit 1
  mkdir -p "\$FT_PIP_SCRIPTS_DIR"
  for arg in "\$@"; do
    case "\$arg" in
      cmake) printf '#!/usr/bin/env bash\necho "cmake version 3.31.0"\n' >"\$FT_PIP_SCRIPTS_DIR/cmake" ;;
      ninja) printf '#!/usr/bin/env bash\necho 1.12.1\n' >"\$FT_PIP_SCRIPTS_DIR/ninja" ;;
    esac
  done
  chmod +x "\$FT_PIP_SCRIPTS_DIR"/* 2>/dev/null
  exit 0
fi
exec "$real_python" "\$@"
SHIM
chmod +x "$work/shims"/*

# run_case NAME EXPECTED_STATUS CMAKE_VERSION(or none) NINJA(yes/no) ENV... : runs install_deps.sh in a fresh
# fake machine; leaves its output in $out, its apt-get/pip log in $log.
run_case() {
  local name=$1 expected=$2 cmake_version=$3 ninja=$4
  shift 4
  local case_dir="$work/case_$name"
  mkdir -p "$case_dir/bin" "$case_dir/state"
  if [[ "$cmake_version" != none ]]; then
    printf '#!/usr/bin/env bash\necho "cmake version %s"\n' "$cmake_version" >"$case_dir/bin/cmake"
  fi
  [[ "$ninja" == yes ]] && printf '#!/usr/bin/env bash\necho 1.11.1\n' >"$case_dir/bin/ninja"
  chmod +x "$case_dir/bin"/* 2>/dev/null
  log="$case_dir/log"
  touch "$log"
  out=$(env -i HOME="$HOME" PATH="$work/shims:$case_dir/bin:$work/system" FAKE_LOG="$log" FAKE_STATE="$case_dir/state" \
        FT_PIP_SCRIPTS_DIR="$case_dir/pip-bin" "$@" bash "$root/scripts/install_deps.sh" 2>&1)
  status=$?
  if [[ $status -ne $expected ]]; then
    fail "$name: exit status $status, expected $expected"
  fi
  current=$name
}

fail() {
  echo "FAIL $*"
  echo "---- output:"; echo "$out"; echo "---- apt-get/pip log:"; cat "$log"; echo "----"
  failures=$((failures + 1))
}
expect_output() { [[ "$out" == *"$1"* ]] || fail "$current: output lacks '$1'"; }
expect_log() { grep -qF -- "$1" "$log" || fail "$current: apt-get/pip were not asked '$1'"; }
expect_no_log() { [[ ! -s "$log" ]] || fail "$current: apt-get/pip were called, expected nothing"; }

# Everything present, offline: nothing installed, nothing fetched.
run_case all_present_offline 0 3.25.1 yes FAKE_OFFLINE=1
expect_no_log
expect_output "cmake 3.25.1"

# Ubuntu 22.04's CMake 3.22: pip's cmake is installed and used.
run_case old_cmake 0 3.22.1 yes
expect_output "older than the 3.24 the build needs"
expect_log "pip -m pip install"
expect_log "cmake"
expect_output "cmake 3.31.0 ($work/case_old_cmake/pip-bin/cmake)"
grep -q "apt-get" "$log" && fail "old_cmake: apt-get called"

# Neither CMake nor Ninja, non-root: both from pip into the user site, no sudo needed.
run_case no_cmake_no_ninja_user 0 none no FAKE_UID=1000
expect_log "--user"
expect_log "cmake ninja"
expect_output "ninja 1.12.1"

# Old CMake, offline: a clear failure naming what to run.
run_case old_cmake_offline 1 3.22.1 yes FAKE_OFFLINE=1
expect_output "pip could not install cmake (no network?)"

# A missing header, non-root: the exact command, nothing run.
run_case missing_header_user 1 3.25.1 yes FAKE_UID=1000 FAKE_NO_CLI11=1
expect_output "install them with: sudo apt-get update && sudo apt-get install -y libcli11-dev"
expect_no_log

# A missing header, root: apt-get installs exactly it.
run_case missing_header_root 0 3.25.1 yes FAKE_NO_CLI11=1
expect_log "apt-get install -y -qq --no-install-recommends libcli11-dev"

# A missing header, root, offline: apt-get update fails and says so.
run_case missing_header_offline 1 3.25.1 yes FAKE_NO_CLI11=1 FAKE_OFFLINE=1
expect_output "apt-get update failed (no network?): cannot install libcli11-dev"

if ((failures > 0)); then
  echo "test_install_deps: $failures failure(s)"
  exit 1
fi
echo "test_install_deps: 7 cases passed"
