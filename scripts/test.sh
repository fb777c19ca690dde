#!/usr/bin/env bash
# oomlab's fast tiers: what a developer runs before every commit, and the first half of CI
# (.ci/run; the second half is scripts/test_slow.sh). Set up + build (scripts/setup.sh), then:
#   * ctest -LE slow: every C++ test of the tiers unit, ops, models, cli, ranks and gpu (the
#     GPU tests skip without a GPU) except those labelled slow; a test without a tier label
#     fails the run (CMakeLists.txt: tests/test_*.cpp name their tier);
#   * pyflakes over the Python (scripts/, the experiments' report.py, tests/*.py, the package);
#   * the Python checks of the GPU kit's scripts (tests/test_gpu_tools.py, test_gpu_kit.py;
#     the kit's end-to-end run, GpuKit, is in the slow tier) and of the report (tests/test_report.py: an
#     experiment planted in a copy of experiments/ runs and renders; tests/test_gpu_records.py:
#     the newest GPU record is the latest run; tests/test_report_links.py: every link and every
#     path REPORT.md names exists in the repository);
#   * every committed results file valid (scripts/check_results.py);
#   * every measured figure an experiment's README (or README.md, docs/) states by hand is in
#     its results file (scripts/check_readme_figures.py; tests/test_readme_figures.py);
#   * every repository file a source comment names exists (scripts/check_comment_refs.py;
#     tests/test_comment_refs.py);
#   * the figures and REPORT.md regenerated from the committed results into a temp dir
#     (scripts/make_report.py); a missing, empty or non-PNG figure fails;
#   * the Python package: its wheel built from this tree (the build dir's libraries), installed
#     in a venv, its pytest suite run against it (scripts/python_package.sh).
# Steps after the build all run even if one fails; the exit status is non-zero on any failure.
# Environment: OOMLAB_BUILD_DIR (default: build), OOMLAB_RESULTS_DIR (default: reports/results),
#   OOMLAB_SKIP_SETUP=1 (use an existing build; for iterating, never in CI),
#   OOMLAB_CTEST_JOBS (default: 2), OOMLAB_PYTHON (python with matplotlib for the report).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${OOMLAB_BUILD_DIR:-build}"
results_dir="${OOMLAB_RESULTS_DIR:-reports/results}"
failures=()
t_start=$(date +%s)

step() { echo; echo "=== test: $* ==="; }

if [[ "${OOMLAB_SKIP_SETUP:-0}" != 1 ]]; then
  step "setup and build ($build_dir)"
  OOMLAB_BUILD_DIR="$build_dir" bash scripts/setup.sh
fi
t_built=$(date +%s)

step "ctest, fast tiers (ctest -LE slow, $build_dir)"
if ! ctest --test-dir "$build_dir" --output-on-failure -j"${OOMLAB_CTEST_JOBS:-2}" --timeout 600 \
     --no-tests=error -LE slow; then
  failures+=("ctest")
fi
untiered=$(ctest --test-dir "$build_dir" -N -LE 'unit|ops|models|cli|ranks|gpu|slow' | sed -n 's/^Total Tests: //p')
if [[ "$untiered" != 0 ]]; then
  echo "tests without a tier label: $untiered (ctest --test-dir $build_dir -N -LE 'unit|ops|models|cli|ranks|gpu|slow')"
  failures+=("untiered tests")
fi

step "pyflakes (scripts/, experiments/*/report.py, tests/*.py, python/, tests/python/)"
if ! /usr/bin/python3 -m pyflakes scripts experiments tests/*.py python tests/python; then
  failures+=("pyflakes")
fi

step "the GPU kit's scripts and the report on the CPU (tests/test_gpu_*.py, test_report*.py, test_readme_figures.py, test_comment_refs.py, test_plan_calibration.py, test_cli_probe.py)"
if ! OOMLAB_BUILD_DIR="$build_dir" python3 -m unittest tests/test_gpu_tools.py tests/test_gpu_kit.py tests/test_gpu_rounds.py \
     tests/test_gpu_records.py tests/test_gpu_results.py tests/test_report.py tests/test_report_links.py \
     tests/test_readme_figures.py tests/test_comment_refs.py tests/test_plan_calibration.py \
     tests/test_cli_probe.py; then
  failures+=("python tests")
fi

step "results files are valid ($results_dir)"
if ! python3 scripts/check_results.py "$results_dir"; then
  failures+=("check_results")
fi

step "figures stated in the READMEs are in their results (experiments/*/README.md, reports/benchmarks/, README.md, docs/)"
if ! python3 scripts/check_readme_figures.py --results "$results_dir"; then
  failures+=("check_readme_figures")
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

step "the Python package (scripts/python_package.sh: pip wheel . once, installed in a venv; pytest tests/python)"
if ! OOMLAB_BUILD_DIR="$build_dir" bash scripts/python_package.sh; then
  failures+=("python package")
fi

echo
echo "test: build $((t_built - t_start)) s, tests $(( $(date +%s) - t_built )) s"
if ((${#failures[@]})); then
  echo "test: FAILED: ${failures[*]}"
  exit 1
fi
echo "test: all fast tiers passed"
