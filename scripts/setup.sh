#!/usr/bin/env bash
# Install oomlab's build/test dependencies (Debian/Ubuntu) and configure + build it.
# Idempotent: apt is skipped entirely when every package is already installed (checked with
# dpkg-query), and the CMake build is incremental, so a second run takes seconds.
# Environment: OOMLAB_BUILD_DIR (default: build), OOMLAB_BUILD_TYPE (default: Release),
#   OOMLAB_JOBS (default: nproc), OOMLAB_CMAKE_ARGS (extra configure flags, word-split),
#   OOMLAB_SKIP_BUILD=1 (install packages only), OOMLAB_BUILD_TARGETS (only these targets).
set -euo pipefail
cd "$(dirname "$0")/.."

# clang, libclang-rt-dev (libFuzzer, clang's sanitizer runtimes), libomp-dev (LLVM's OpenMP
# with Archer, for ThreadSanitizer), lld (LLVM's linker: sanitizer builds link 4-5x faster)
# and ninja-build (parallel builds of selected targets) serve scripts/sanitize.sh and
# scripts/fuzz.sh. libgloo-dev is the gloo communicator's library
# (PyTorch's CPU backend); slurm-wlm and munge serve scripts/slurm_allreduce.sh; strace kills
# a training run at each checkpoint publication point (tests/test_checkpoint_kill.cpp).
# libopenblas-openmp-dev: OpenBLAS on the same OpenMP pool as oomlab's kernels (CMakeLists.txt).
# pybind11-dev, python3-dev and python3-venv: the Python package (pyproject.toml; its tests run
# in a venv, scripts/test.sh).
packages=(cmake g++ make libopenblas-dev libopenblas-openmp-dev libopenmpi-dev openmpi-bin zlib1g-dev
          nlohmann-json3-dev libgtest-dev libbenchmark-dev python3 python3-matplotlib python3-pyflakes
          dataset-fashion-mnist clang libclang-rt-dev libomp-dev ninja-build lld
          libgloo-dev slurm-wlm munge strace pybind11-dev python3-dev python3-venv)

if command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for pkg in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then sudo=(sudo); fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${packages[@]}"
  else
    echo "setup: all ${#packages[@]} packages already installed"
  fi
else
  echo "setup: no dpkg-query (not Debian/Ubuntu); install the equivalents of: ${packages[*]}" >&2
fi

if [[ "${OOMLAB_SKIP_BUILD:-0}" == 1 ]]; then
  exit 0
fi
build_dir="${OOMLAB_BUILD_DIR:-build}"
jobs="${OOMLAB_JOBS:-$(nproc)}"
# Ninja for a new build folder (an existing one keeps its generator): it compiles a test's
# files while the libraries it links are still being archived, where Make waits for them.
generator=()
if [[ ! -f "$build_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# shellcheck disable=SC2086  # OOMLAB_CMAKE_ARGS is a list of flags
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${OOMLAB_BUILD_TYPE:-Release}" ${OOMLAB_CMAKE_ARGS:-}
# OOMLAB_BUILD_TARGETS: build only these (the main job builds the oomlab CLI alone).
# shellcheck disable=SC2086  # a list of targets
cmake --build "$build_dir" -j"$jobs" ${OOMLAB_BUILD_TARGETS:+--target $OOMLAB_BUILD_TARGETS}
