#!/usr/bin/env bash
# Build oomlab on a lent GPU machine (CUDA 13, cmake, ninja, g++, PyTorch; no apt, no
# internet), run the GPU tests and the benchmarks, and leave results and logs in one folder.
# Prepare on a Debian machine first: bash scripts/gpu_stage.sh (fills .gpu/debs), then
# carry ".gpu" with the device run. Phases (default: all, in this order):
#   build    unpack .gpu/debs into .gpu/sysroot; configure + build build-gpu (sm_90);
#            incremental when build-gpu is still there
#   test     ctest (the whole suite: GPU tests run instead of skipping; 240 s per test)
#   sanitize compute-sanitizer memcheck and racecheck on the op parity tests (each bounded
#            by OOMLAB_GPU_SANITIZER_S, default 200 s)
#   bench    bench_cuda (bandwidth vs D2D copy), oomlab train vs scripts/torch_reference.py
#            (ResNet-50 b128, VGG16 b64, bert-base b32 s128; strict fp32 and TF32;
#            PyTorch eager, and torch.compile for ResNet-50 TF32), as results JSON with
#            device provenance;
#            then per-op time breakdowns (scripts/trace_breakdown.py) of ResNet-50 and BERT
#   pack     $OUT/gpu_results.tar.gz (everything under the work folder) + summary.txt
# Usage (device tool): bash scripts/gpu_run.sh [phase ...]   with $OUT set (or OOMLAB_GPU_OUT).
# Each phase appends to <out>/summary.txt; the last lines of it are the table to read.
# A device call may run 10 minutes and the machine goes back 30 s after a call, so make
# each call whole: `build test pack`, then `build sanitize pack`, then `build bench pack`
# (build is incremental while the machine is warm; from cold it is a full build).
# Every oomlab / PyTorch run is bounded by `timeout` so that one hang costs one point.
# Environment: OOMLAB_GPU_ARCH (default 90), OOMLAB_GPU_STEPS (timed steps, default 30).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out="${OUT:-${OOMLAB_GPU_OUT:-$root/gpu_out}}"
work="$root/gpu_work"          # raw results and logs (ignored by git: /gpu_work/)
mkdir -p "$out" "$work/logs" "$work/results"
summary="$out/summary.txt"
sys="$root/.gpu/sysroot"
bld="$root/build-gpu"
steps="${OOMLAB_GPU_STEPS:-30}"
say() { echo "gpu_run: $*" | tee -a "$summary"; }

lib_path() {   # runtime libraries: the unpacked Debian ones and cuDNN from PyTorch's wheels
  local cudnn
  cudnn=$(python3 -c 'import nvidia.cudnn as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
  echo "$sys/usr/lib/x86_64-linux-gnu/openblas-pthread:$sys/usr/lib/x86_64-linux-gnu:${cudnn:-}:${LD_LIBRARY_PATH:-}"
}

phase_build() {
  [[ -d .gpu/debs ]] || { say "no .gpu/debs: run scripts/gpu_stage.sh here first and carry .gpu"; return 1; }
  mkdir -p "$sys"
  for f in .gpu/debs/*.deb; do dpkg -x "$f" "$sys"; done
  # gtest_discover_tests runs the test binaries during the build: they need the libraries.
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH=$(lib_path)
  local cudnn_root zlib
  cudnn_root=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
  zlib=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)
  {
    nvidia-smi; nvcc --version; g++ --version | head -1; cmake --version | head -1
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
    echo "cudnn root: $cudnn_root"; echo "zlib: $zlib"
  } > "$work/logs/environment.txt" 2>&1
  local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  say "configure (cuDNN from $cudnn_root)"
  cmake -S . -B "$bld" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="${OOMLAB_GPU_ARCH:-90}" \
    -DCMAKE_PREFIX_PATH="$sys/usr" \
    -DOPENBLAS_INCLUDE_DIR="$sys/usr/include/x86_64-linux-gnu/openblas-pthread" \
    -DOPENBLAS_LIBRARY="$sys/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so" \
    -DCUDNN_INCLUDE_DIR="$cudnn_root/include" -DCUDNN_LIBRARY="$cudnn_root/lib/libcudnn.so.9" \
    -DZLIB_INCLUDE_DIR="$sys/usr/include" -DZLIB_LIBRARY="$zlib" \
    > "$work/logs/configure.log" 2>&1 || { say "configure FAILED (logs/configure.log)"; tail -20 "$work/logs/configure.log"; return 1; }
  grep -q "CUDA backend ON" "$work/logs/configure.log" || { say "configure: CUDA backend OFF"; return 1; }
  say "build"
  local t0=$SECONDS
  cmake --build "$bld" -j"$(nproc)" > "$work/logs/build.log" 2>&1 ||
    { say "build FAILED (logs/build.log)"; grep -m20 -E "error" "$work/logs/build.log"; return 1; }
  say "build ok in $((SECONDS - t0)) s"
}

phase_test() {
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH=$(lib_path)
  say "ctest"
  ctest --test-dir "$bld" -j8 --timeout 240 --output-junit "$work/logs/ctest_junit.xml" > "$work/logs/ctest.log" 2>&1
  local rc=$?
  say "ctest rc=$rc: $(grep -E 'tests passed' "$work/logs/ctest.log")"
  grep -E "\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Exception" "$work/logs/ctest.log" | head -20 | tee -a "$summary"
  say "skipped: $(grep -c '(Skipped)' "$work/logs/ctest.log") (expected: none of the CUDA tests)"
  # A dtype the backend lacks passes the parity case with a NOTE: list what was not compared.
  timeout 240 "$bld/test_cuda_parity" > "$work/logs/test_cuda_parity.log" 2>&1
  say "parity cases (op, dtype) not covered on the GPU: $(grep -c '^\[   NOTE   \]' "$work/logs/test_cuda_parity.log")"
  grep '^\[   NOTE   \]' "$work/logs/test_cuda_parity.log" | cut -c1-160 | tee -a "$summary"
}

phase_sanitize() {
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH=$(lib_path)
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls "$(dirname "$(command -v nvcc)")/compute-sanitizer" \
    /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  if [[ -n $sanitizer ]]; then
    # OOMLAB_NO_CACHING=1: one cudaMalloc per tensor, so memcheck sees each tensor's bounds
    # (a pooled segment would hide overruns into its neighbours). rc 124 = cut off by the
    # bound (the log says how far it got).
    for tool in memcheck racecheck; do
      OOMLAB_NO_CACHING=1 timeout "${OOMLAB_GPU_SANITIZER_S:-200}" "$sanitizer" --tool "$tool" --error-exitcode 9 \
        "$bld/test_cuda_parity" > "$work/logs/sanitizer_$tool.log" 2>&1
      say "compute-sanitizer $tool on test_cuda_parity: rc=$? ($(grep -E 'ERROR SUMMARY' "$work/logs/sanitizer_$tool.log" | tail -1); $(grep -c '^\[       OK' "$work/logs/sanitizer_$tool.log") cases OK)"
    done
  else
    say "compute-sanitizer not found: sanitizer runs skipped"
  fi
}

# oomlab's data flags for a model: synthetic images, or for bert-* synthetic-seq with every
# batch 128 tokens wide, as PyTorch's (its padding is masked, not cut).
data_args() {
  case $1 in
    bert-*) echo --dataset synthetic-seq --seq-len 128 --seq-min-len 128 ;;
    *) echo --dataset synthetic ;;
  esac
}

# One oomlab train run and its PyTorch twin; tag names the files.
compare_point() {   # model batch tf32 [extra oomlab args...]
  local model=$1 batch=$2 tf32=$3; shift 3
  local tag="${model}_b${batch}_tf32-${tf32}"
  # shellcheck disable=SC2046
  timeout 240 "$bld/oomlab" train --model "$model" $(data_args "$model") --device cuda --batch "$batch" \
    --steps $((steps + 5)) --synthetic-size $((batch * 4)) --eval-batches 0 --optimizer sgd --lr 0.01 \
    --allow-tf32 "$tf32" --quiet "$@" --json "$work/results/oomlab_$tag.json" > "$work/logs/oomlab_$tag.log" 2>&1
  say "oomlab $tag rc=$? $(tail -1 "$work/logs/oomlab_$tag.log")"
  local modes=(eager)
  [[ $tf32 == all && $model == resnet50 ]] && modes+=(compile)
  for mode in "${modes[@]}"; do
    local targs=()
    [[ $model == bert-* ]] && targs=(--seq-len 128 --classes 2)   # oomlab's synthetic-seq is binary
    timeout $([[ $mode == compile ]] && echo 420 || echo 240) python3 scripts/torch_reference.py --model "$model" --batch "$batch" --steps "$steps" --warmup 5 \
      --optimizer sgd --lr 0.01 --allow-tf32 "$tf32" --mode "$mode" "${targs[@]}" \
      --json "$work/results/torch_${mode}_$tag.json" > "$work/logs/torch_${mode}_$tag.log" 2>&1
    say "torch $mode $tag rc=$? $(tail -1 "$work/logs/torch_${mode}_$tag.log")"
  done
  pack_now   # what is done so far comes back even if the call is cut off
}

# Per-op time of a few synchronized steps (OOMLAB_CUDA_SYNC=1: each span covers its kernels).
profile_point() {   # model batch [extra oomlab args...]
  local model=$1 batch=$2; shift 2
  local tag="${model}_b${batch}"
  # shellcheck disable=SC2046
  OOMLAB_CUDA_SYNC=1 timeout 240 "$bld/oomlab" train --model "$model" $(data_args "$model") --device cuda \
    --batch "$batch" --steps 4 \
    --synthetic-size $((batch * 4)) --eval-batches 0 --optimizer sgd --lr 0.01 --quiet "$@" \
    --chrome-trace "$work/results/trace_$tag.json" > "$work/logs/profile_$tag.log" 2>&1
  say "profile $tag rc=$? (4 synchronized steps, the first with cuDNN algorithm selection)"
  python3 scripts/trace_breakdown.py "$work/results/trace_$tag.json" > "$work/results/breakdown_$tag.txt" 2>&1
  head -14 "$work/results/breakdown_$tag.txt" | tee -a "$summary"
  pack_now
}

phase_bench() {
  export LD_LIBRARY_PATH; LD_LIBRARY_PATH=$(lib_path)
  timeout 180 "$bld/bench_cuda" --benchmark_out="$work/results/bench_cuda.json" --benchmark_out_format=json \
    > "$work/logs/bench_cuda.log" 2>&1
  say "bench_cuda rc=$?"; grep -E "^cuda/" "$work/logs/bench_cuda.log" | tee -a "$summary"
  # The issue's bars: strict fp32 (none) and TF32 (all); torch.compile once (ResNet-50, TF32).
  for tf32 in none all; do
    compare_point resnet50 128 "$tf32"
    compare_point vgg16 64 "$tf32"
  done
  compare_point bert-base 32 none
  compare_point bert-base 32 all
  python3 scripts/gpu_compare.py "$work/results" | tee -a "$summary"
  profile_point resnet50 128 --allow-tf32 all
  profile_point bert-base 32
}

pack_now() {   # the tarball is replaced whole (rename), never left half-written
  tar -czf "$out/gpu_results.tar.gz.tmp" -C "$root" gpu_work && mv -f "$out/gpu_results.tar.gz.tmp" "$out/gpu_results.tar.gz"
}
phase_pack() {
  pack_now
  say "packed $(du -h "$out/gpu_results.tar.gz" | cut -f1) into gpu_results.tar.gz"
}

phases=("$@")
((${#phases[@]})) || phases=(build test sanitize bench pack)
status=0
for p in "${phases[@]}"; do
  case $p in
    build|test|sanitize|bench|pack) "phase_$p" || { status=1; [[ $p == build ]] && { phase_pack; exit 1; }; } ;;
    *) echo "gpu_run: unknown phase '$p' (build, test, sanitize, bench, pack)" >&2; exit 2 ;;
  esac
done
exit $status
