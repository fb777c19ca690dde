#!/usr/bin/env bash
# The second half of CI (.ci/run runs scripts/test.sh, the README's test command, first):
#   * ctest -L slow: the long tests of every tier (the learning-curve runs, VGG's checkpoint
#     policies, bert-mini's accumulation and data-parallel equivalences ...);
#   * the GPU kit end to end without a GPU (tests/test_gpu_kit.py GpuKit: pack, the
#     one-line stop, the dry run through every step);
#   * the CLI probe (scripts/cli_probe.py via tests/test_cli_probe.py: 300 real runs with random
#     flags at edge values, none may crash, exit 70 or hang);
#   * the sanitizer runs (scripts/sanitize.sh: the whole suite under ASan+UBSan in build-asan/,
#     then, after the fuzz targets, the threaded tests under TSan in build-tsan/; under CI=true
#     build-asan/ is removed between the two, and the free disk is printed around them);
#   * the fuzz targets (scripts/fuzz.sh: each libFuzzer target replays its seed corpus, then
#     fuzzes for OOMLAB_FUZZ_SECONDS, 10 here to keep CI within 30 minutes; fuzz.sh's own
#     default is 60, longer runs are local; in build-asan/, which the sanitizer run built with
#     the fuzz configuration).
# Uses the build scripts/test.sh made (OOMLAB_BUILD_DIR, default build). Every step runs even
# if one fails; the exit status is non-zero on any failure; each step prints its seconds.
# Environment: OOMLAB_SKIP_SANITIZERS=1, OOMLAB_SKIP_FUZZ=1 (local iteration only),
#   OOMLAB_CTEST_JOBS (default 2).
set -uo pipefail
cd "$(dirname "$0")/.."
build_dir="${OOMLAB_BUILD_DIR:-build}"
failures=()
timings=()
run_step() {   # name command...
  local name=$1 t0
  shift
  echo; echo "=== test_slow: $name ==="
  t0=$(date +%s)
  "$@" || failures+=("$name")
  timings+=("$name $(( $(date +%s) - t0 )) s")
}

run_step "ctest -L slow" ctest --test-dir "$build_dir" --output-on-failure -j"${OOMLAB_CTEST_JOBS:-2}" --timeout 900 \
  --no-tests=error -L slow
run_step "GPU kit end to end" env OOMLAB_BUILD_DIR="$build_dir" OOMLAB_SLOW_TESTS=1 \
  python3 -m unittest tests.test_gpu_kit.GpuKit
run_step "CLI probe (300 random runs)" env OOMLAB_BUILD_DIR="$build_dir" OOMLAB_SLOW_TESTS=1 \
  python3 -m unittest tests.test_cli_probe.ProbeOnTheBuild
disk_free() { echo "test_slow: disk: $(df -h . | awk 'NR == 2 {print $4 " free of " $2}')"; }
disk_free
if [[ "${OOMLAB_SKIP_SANITIZERS:-0}" != 1 ]]; then
  run_step "sanitizers: asan" env OOMLAB_SANITIZERS=asan bash scripts/sanitize.sh
fi
if [[ "${OOMLAB_SKIP_FUZZ:-0}" != 1 ]]; then
  export OOMLAB_FUZZ_SECONDS="${OOMLAB_FUZZ_SECONDS:-10}"
  run_step "fuzz targets ($OOMLAB_FUZZ_SECONDS s each)" bash scripts/fuzz.sh
fi
disk_free
# In CI's throw-away clone the ASan tree is done with: free it before the TSan build (a CI
# run once failed with "No space left on device" in the TSan build, 2026-11-29).
if [[ "${CI:-}" == true ]]; then rm -rf build-asan; disk_free; fi
if [[ "${OOMLAB_SKIP_SANITIZERS:-0}" != 1 ]]; then
  run_step "sanitizers: tsan" env OOMLAB_SANITIZERS=tsan bash scripts/sanitize.sh
fi

echo
printf 'test_slow: %s\n' "${timings[@]}"
if ((${#failures[@]})); then
  echo "test_slow: FAILED: ${failures[*]}"
  exit 1
fi
echo "test_slow: all passed"
