#!/usr/bin/env bash
# Stage, on this (Debian 12) machine, what the lent GPU machine lacks for building and
# testing oomlab: it has CUDA 13, cmake, ninja, g++ and PyTorch (whose pip packages carry
# cuDNN 9 and NCCL), but no apt and no internet. The Debian packages below are downloaded
# (not installed) into .gpu/debs (ignored by git, about 14 MiB); scripts/gpu_run.sh unpacks
# them there with dpkg -x into .gpu/sysroot and builds against them. Idempotent.
# Usage: bash scripts/gpu_stage.sh   then carry ".gpu" in the device run (see gpu_run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5 libquadmath0
          nlohmann-json3-dev libgtest-dev libbenchmark-dev libbenchmark1debian zlib1g-dev)
mkdir -p .gpu/debs
cd .gpu/debs
missing=()
for p in "${packages[@]}"; do
  compgen -G "${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get download "${missing[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
fi
for p in "${packages[@]}"; do
  compgen -G "${p}_*.deb" >/dev/null || { echo "gpu_stage: could not download $p" >&2; exit 1; }
done
echo "gpu_stage: $(ls ./*.deb | wc -l) packages in .gpu/debs ($(du -sh . | cut -f1))"
