#!/usr/bin/env bash
# oomlab's whole check, as CI runs it (.ci/run): set up + build (scripts/setup.sh), run the
# C++ tests (ctest), the GPU kit's checks (tests/test_gpu_tools.py: trace_breakdown, gpu_report,
# gpu_pack + gpu_run without a GPU and dry, torch_bench / torch_reference input errors), validate every committed results file
# (scripts/check_results.py), then
# regenerate the figures and REPORT.md from the committed results into a temp dir
# (scripts/make_report.py) and fail if any expected figure is missing, empty or not a PNG;
# then the sanitizer runs (scripts/sanitize.sh: the whole suite under ASan+UBSan in
# build-asan/, the threaded tests under TSan in build-tsan/) and the fuzz targets
# (scripts/fuzz.sh: each libFuzzer target for OOMLAB_FUZZ_SECONDS, default 60, in build-fuzz/).
# Steps after the build all run even if one fails; the exit status is non-zero on any failure.
# Environment: OOMLAB_BUILD_DIR (default: build), OOMLAB_RESULTS_DIR (default: reports/results),
#   OOMLAB_SKIP_SETUP=1 (use an existing build; for iterating on scripts, never in CI),
#   OOMLAB_CTEST_JOBS (default: 2), OOMLAB_PYTHON (python with matplotlib for the report),
#   OOMLAB_SKIP_SANITIZERS=1, OOMLAB_SKIP_FUZZ=1 (skip those steps when iterating locally;
#   CI runs both: see README "Sanitizers and fuzzing" for how long each takes).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${OOMLAB_BUILD_DIR:-build}"
results_dir="${OOMLAB_RESULTS_DIR:-reports/results}"
failures=()

step() { echo; echo "=== test: $* ==="; }

if [[ "${OOMLAB_SKIP_SETUP:-0}" != 1 ]]; then
  step "setup and build ($build_dir)"
  OOMLAB_BUILD_DIR="$build_dir" bash scripts/setup.sh
fi

step "ctest ($build_dir)"
if ! ctest --test-dir "$build_dir" --output-on-failure -j"${OOMLAB_CTEST_JOBS:-2}" --timeout 600 \
     --no-tests=error; then
  failures+=("ctest")
fi

step "GPU-session scripts on the CPU (tests/test_gpu_tools.py)"
if ! OOMLAB_BUILD_DIR="$build_dir" python3 -m unittest tests/test_gpu_tools.py; then
  failures+=("test_gpu_tools")
fi

step "results files are valid ($results_dir)"
if ! python3 scripts/check_results.py "$results_dir"; then
  failures+=("check_results")
fi

step "figures and report regenerate from $results_dir"
py="${OOMLAB_PYTHON:-python3}"
if ! "$py" -c 'import matplotlib' 2>/dev/null && [[ -x /usr/bin/python3 ]]; then
  py=/usr/bin/python3  # e.g. a pyenv python3 without the distro's python3-matplotlib
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if "$py" scripts/make_report.py --results "$results_dir" --out "$tmp"; then
  [[ -s "$tmp/REPORT.md" ]] || failures+=("REPORT.md missing or empty")
  expected="$("$py" scripts/make_report.py --results "$results_dir" --expected-figures)"
  n=0
  while IFS= read -r fig; do
    [[ -n "$fig" ]] || continue
    n=$((n + 1))
    if [[ ! -s "$tmp/$fig" ]]; then
      echo "missing or empty figure: $fig"
      failures+=("figure $fig")
    elif [[ "$(head -c 8 "$tmp/$fig" | od -An -tx1 | tr -d ' \n')" != 89504e470d0a1a0a ]]; then
      echo "not a PNG: $fig"
      failures+=("figure $fig (not a PNG)")
    else
      echo "ok   $fig ($(wc -c <"$tmp/$fig") bytes)"
    fi
  done <<<"$expected"
  echo "$n expected figure(s) checked"
  if [[ "$results_dir" == reports/results && -f reports/REPORT.md ]] &&
     ! cmp -s reports/REPORT.md "$tmp/REPORT.md"; then
    echo "note: reports/REPORT.md is stale; regenerate it with: python3 scripts/make_report.py"
  fi
else
  failures+=("make_report")
fi

if [[ "${OOMLAB_SKIP_SANITIZERS:-0}" != 1 ]]; then
  step "sanitizers (scripts/sanitize.sh: ASan+UBSan whole suite, TSan threaded tests)"
  if ! bash scripts/sanitize.sh; then
    failures+=("sanitizers")
  fi
else
  step "sanitizers skipped (OOMLAB_SKIP_SANITIZERS=1)"
fi

if [[ "${OOMLAB_SKIP_FUZZ:-0}" != 1 ]]; then
  step "fuzz targets (scripts/fuzz.sh, ${OOMLAB_FUZZ_SECONDS:-60} s each)"
  if ! bash scripts/fuzz.sh; then
    failures+=("fuzz")
  fi
else
  step "fuzz targets skipped (OOMLAB_SKIP_FUZZ=1)"
fi

echo
if ((${#failures[@]})); then
  echo "test: FAILED: ${failures[*]}"
  exit 1
fi
echo "test: all checks passed"
