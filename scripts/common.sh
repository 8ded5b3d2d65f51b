# common.sh — sourced by run.sh and test.sh: configure and build flashtrain into build/ (CUDA when
# nvcc is found), and tell whether a GPU can run the CUDA build.
# Environment: FT_CUDA=AUTO|ON|OFF (default AUTO), FT_CMAKE_ARGS (extra configure arguments, e.g.
# "-DCMAKE_CUDA_ARCHITECTURES=90a"), FT_JOBS (parallel build jobs, default: all cores).

FT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The folder pip installs console scripts (cmake, ninja) into for this user: FT_PIP_SCRIPTS_DIR when set,
# else the environment's scripts folder (a virtual environment, or root) or the user site's bin.
ft_pip_scripts_dir() {
  local python=${PYTHON:-python3}
  if [[ -n "${FT_PIP_SCRIPTS_DIR:-}" ]]; then
    echo "$FT_PIP_SCRIPTS_DIR"
  elif "$python" -c 'import os, sys; sys.exit(not (sys.prefix != sys.base_prefix or os.getuid() == 0))' 2>/dev/null; then
    "$python" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'
  else
    "$python" -c 'import os, site; print(os.path.join(site.getuserbase(), "bin"))' 2>/dev/null
  fi
}

# CMake and Ninja installed by pip (install_deps.sh does when the system's are missing or too old) come
# first on PATH.
if ft_pip_dir=$(ft_pip_scripts_dir) && [[ -n "$ft_pip_dir" ]]; then
  if [[ -x "$ft_pip_dir/cmake" || -x "$ft_pip_dir/ninja" ]]; then PATH="$ft_pip_dir:$PATH"; fi
fi
FT_BUILD="$FT_ROOT/build"
FT_BIN="$FT_BUILD/bin/flashtrain"

# Configure build/ with the 'default' preset (Release, Ninja).
ft_configure() {
  local extra=()
  [[ -n "${FT_CMAKE_ARGS:-}" ]] && read -r -a extra <<<"$FT_CMAKE_ARGS"
  (cd "$FT_ROOT" && cmake --preset default -DFT_CUDA="${FT_CUDA:-AUTO}" "${extra[@]}")
}

# Build the given targets (everything when none), with every core.
ft_build() {
  local targets=()
  (($# > 0)) && targets=(--target "$@")
  cmake --build "$FT_BUILD" -j "${FT_JOBS:-$(nproc)}" "${targets[@]}"
}

# True when the built flashtrain has CUDA compiled in and sees at least one device.
ft_gpu_visible() {
  "$FT_BIN" --version 2>/dev/null | grep -Eq "^CUDA: compiled in, [1-9][0-9]* devices? visible"
}
