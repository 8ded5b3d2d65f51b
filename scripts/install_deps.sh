#!/usr/bin/env bash
# install_deps.sh — installs what building and testing flashtrain needs and is missing: Debian
# packages (compiler, CMake, Ninja, GoogleTest, CLI11, nlohmann-json, Open MPI) and Python packages
# (numpy, pytest, matplotlib, nanobind for the Python module, tokenizers for the tokenizer tests). Installs nothing that is already there; prints one line per step.
# The CUDA toolkit is not installed here: the build uses nvcc when it finds one.
#   bash scripts/install_deps.sh
set -euo pipefail

say() { echo "install_deps: $*"; }

apt_wanted=(cmake ninja-build g++ libgtest-dev libcli11-dev nlohmann-json3-dev openmpi-bin libopenmpi-dev)
python_modules=(numpy pytest matplotlib nanobind tokenizers)  # the PyPI names equal the import names

missing=()
for package in "${apt_wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ! command -v python3 >/dev/null 2>&1; then
  missing+=(python3 python3-pip)
else
  python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
  # The Python module needs Python's headers (Debian's python3-dev; pyenv and venv Pythons carry them).
  python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
    missing+=(python3-dev)
fi

if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    say "missing Debian packages: ${missing[*]}"
    say "install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}"
    exit 1
  fi
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present"
fi

missing_python=()
for module in "${python_modules[@]}"; do
  python3 -c "import $module" >/dev/null 2>&1 || missing_python+=("$module")
done
if ((${#missing_python[@]} > 0)); then
  say "installing Python packages: ${missing_python[*]}"
  pip_flags=(--quiet --disable-pip-version-check --no-input)
  # A non-root user outside a virtual environment installs into the user site.
  if [[ $(id -u) -ne 0 ]] && python3 -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)'; then
    pip_flags+=(--user)
  fi
  # Debian's own Python refuses pip installs (PEP 668) unless told it may.
  if python3 -c 'import sys, sysconfig, os; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_flags+=(--break-system-packages)
  fi
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install "${pip_flags[@]}" "${missing_python[@]}"
else
  say "Python packages present"
fi
