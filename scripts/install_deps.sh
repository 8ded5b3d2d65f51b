#!/usr/bin/env bash
# install_deps.sh — makes sure this machine can build and test flashtrain, checking each tool by what it
# can do rather than by package name: a C++20 compiler, CMake >= 3.24, Ninja, the GoogleTest, CLI11 and
# nlohmann-json headers, Open MPI (mpicxx, mpirun), Python 3 with pip, its headers and the modules numpy,
# pytest, matplotlib, nanobind and tokenizers (the tokenizer tests); optionally clang with libFuzzer (the
# fuzz suite). What is present is used as it is, wherever it came from, so a machine that has everything
# needs no network. CMake and Ninja come from pip (the PyPI packages cmake and ninja) when the system's are missing or too old;
# the rest from Debian packages (apt-get, as root; a non-root user is told the exact command to run).
# Prints one line per step; exit status 0 when everything required is there.
#   bash scripts/install_deps.sh
# Environment: PYTHON (default python3), CXX (default c++), FT_PIP_SCRIPTS_DIR (where pip puts console
# scripts such as cmake; default: the user's or the environment's scripts folder).
set -euo pipefail
caller_path=$PATH
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"  # ft_pip_scripts_dir; puts that folder on PATH

say() { echo "install_deps: $*"; }

python=${PYTHON:-python3}
cxx=${CXX:-c++}
min_cmake=3.24

is_root() { [[ $(id -u) -eq 0 ]]; }

# version_at_least A B: true when dotted version A >= B.
version_at_least() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" == "$2" ]]; }

cmake_ok() {
  local version
  version=$(cmake --version 2>/dev/null | sed -nE '1s/^cmake version ([0-9][0-9.]*).*/\1/p') || return 1
  [[ -n "$version" ]] && version_at_least "$version" "$min_cmake"
}
ninja_ok() { ninja --version >/dev/null 2>&1; }
cxx20_ok() { echo 'int main() { return 0; }' | "$cxx" -std=c++20 -x c++ - -o /dev/null >/dev/null 2>&1; }
# header_ok HEADER: the compiler finds and parses it.
header_ok() { printf '#include <%s>\nint main() { return 0; }\n' "$1" | "$cxx" -std=c++20 -fsyntax-only -x c++ - >/dev/null 2>&1; }
gtest_ok() {
  printf '#include <gtest/gtest.h>\nTEST(A, B) {}\n' |
    "$cxx" -std=c++20 -x c++ - -lgtest -lgtest_main -pthread -o /dev/null >/dev/null 2>&1
}
mpi_ok() { mpicxx --version >/dev/null 2>&1 && mpirun --version >/dev/null 2>&1; }
fuzzer_ok() {
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    clang++ -fsanitize=fuzzer -x c++ - -o /dev/null >/dev/null 2>&1
}
python_headers_ok() {
  "$python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null
}

# pip_install PACKAGES...: into the environment, or the user site outside one (no root needed).
pip_install() {
  local flags=(--quiet --disable-pip-version-check --no-input)
  if ! is_root && "$python" -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)'; then flags+=(--user); fi
  # Debian's own Python refuses pip installs (PEP 668) unless told it may.
  if "$python" -c 'import sys, sysconfig, os; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    flags+=(--break-system-packages)
  fi
  PIP_ROOT_USER_ACTION=ignore "$python" -m pip install "${flags[@]}" "$@"
}

# ---- 1. what the system lacks, as Debian packages (CMake and Ninja are pip's business, below) ----------
apt_missing=()
optional_missing=()
command -v "$python" >/dev/null 2>&1 || apt_missing+=(python3)
if command -v "$python" >/dev/null 2>&1; then
  "$python" -m pip --version >/dev/null 2>&1 || apt_missing+=(python3-pip)
  python_headers_ok || apt_missing+=(python3-dev)
fi
cxx20_ok || apt_missing+=(g++)
if cxx20_ok; then
  gtest_ok || apt_missing+=(libgtest-dev)
  header_ok CLI/CLI.hpp || apt_missing+=(libcli11-dev)
  header_ok nlohmann/json.hpp || apt_missing+=(nlohmann-json3-dev)
fi
mpi_ok || apt_missing+=(openmpi-bin libopenmpi-dev)
if ! command -v clang++ >/dev/null 2>&1; then
  optional_missing+=(clang)
elif ! fuzzer_ok; then
  major=$(clang++ --version | sed -nE '1s/.*clang version ([0-9]+).*/\1/p')
  optional_missing+=("libclang-rt-${major:-14}-dev")
fi

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get update -qq >/dev/null 2>&1; then
    say "apt-get update failed (no network?): cannot install $*"
    return 1
  fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ((${#apt_missing[@]} > 0)); then
  if ! is_root; then
    say "missing: ${apt_missing[*]}"
    say "install them with: sudo apt-get update && sudo apt-get install -y ${apt_missing[*]}"
    exit 1
  fi
  say "installing Debian packages: ${apt_missing[*]}"
  apt_install "${apt_missing[@]}" || exit 1
else
  say "compiler, headers, MPI and Python present"
fi
if ((${#optional_missing[@]} > 0)); then
  if is_root && apt_install "${optional_missing[@]}"; then
    say "installed (for the fuzz suite): ${optional_missing[*]}"
  else
    say "optional, for the fuzz suite (clang with libFuzzer): sudo apt-get install -y ${optional_missing[*]}"
  fi
fi

# ---- 2. CMake >= 3.24 and Ninja: the system's when good enough, else pip's ------------------------------
scripts=$(ft_pip_scripts_dir)
export PATH="$scripts:$PATH"  # pip's tools, once installed, win over the system's
pip_tools=()
cmake_ok || pip_tools+=(cmake)
ninja_ok || pip_tools+=(ninja)
if ((${#pip_tools[@]} > 0)); then
  if command -v cmake >/dev/null 2>&1 && ! cmake_ok; then
    say "$(command -v cmake) is $(cmake --version | head -n 1), older than the $min_cmake the build needs"
  fi
  say "installing from PyPI: ${pip_tools[*]} (into $scripts)"
  if ! pip_install "${pip_tools[@]}"; then
    say "pip could not install ${pip_tools[*]} (no network?); install CMake >= $min_cmake and Ninja, or run:"
    say "  $python -m pip install --user ${pip_tools[*]}"
    exit 1
  fi
  hash -r
  if ! cmake_ok || ! ninja_ok; then
    say "pip installed ${pip_tools[*]} into $scripts, but the tools there do not run; check that folder"
    exit 1
  fi
  case ":$caller_path:" in
    *":$scripts:"*) ;;
    *) say "pip's tools are in $scripts: scripts/test.sh and run.sh find them; elsewhere add it to PATH:"
       say "  export PATH=\"$scripts:\$PATH\"" ;;
  esac
fi
say "cmake $(cmake --version | sed -nE '1s/^cmake version //p') ($(command -v cmake)), ninja $(ninja --version) ($(command -v ninja))"

# ---- 3. Python modules ----------------------------------------------------------------------------------
python_modules=(numpy pytest matplotlib nanobind tokenizers)  # the PyPI names equal the import names
missing_python=()
for module in "${python_modules[@]}"; do
  "$python" -c "import $module" >/dev/null 2>&1 || missing_python+=("$module")
done
if ((${#missing_python[@]} > 0)); then
  say "installing Python packages: ${missing_python[*]}"
  if ! pip_install "${missing_python[@]}"; then
    say "pip could not install ${missing_python[*]} (no network?); run: $python -m pip install --user ${missing_python[*]}"
    exit 1
  fi
else
  say "Python packages present"
fi
