#!/usr/bin/env bash
# oomlab's main job: set up + build the oomlab CLI (nothing else), run every experiment in experiments/ (on each
# experiment's default device), then render the figures and REPORT.md from those results.
#   quick (default): results and report go to a folder of their own, results/quick/ (not
#     tracked; OOMLAB_QUICK_RESULTS overrides it): the committed results in reports/results/
#     and reports/REPORT.md are left untouched, so `git status --porcelain reports/` stays empty.
#   full: the committed results, reports/results/NAME.json, and reports/REPORT.md with its
#     figures; commit them from a clean tree (docs/VERDICTS.md).
# Usage: bash scripts/run_experiments.sh [quick|full]
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-quick}"
case "$profile" in
  quick) results="${OOMLAB_QUICK_RESULTS:-results/quick}"; report="$results" ;;
  full) results=reports/results; report=reports ;;
  *) echo "run_experiments: unknown profile '$profile' (quick or full)" >&2; exit 2 ;;
esac
build_dir="${OOMLAB_BUILD_DIR:-build}"
OOMLAB_BUILD_DIR="$build_dir" OOMLAB_BUILD_TARGETS=oomlab bash scripts/setup.sh   # the experiments run the CLI alone
mkdir -p "$results"
t0=$(date +%s)
for dir in experiments/[0-9][0-9]_*/; do
  [[ -f "$dir/experiment.json" ]] || continue
  name=$(basename "$dir")
  echo "=== oomlab run $dir --profile $profile --out $results/$name.json"
  t1=$(date +%s)
  "$build_dir/oomlab" run "$dir" --profile "$profile" --out "$results/$name.json"
  echo "=== $name: $(( $(date +%s) - t1 )) s"
done
echo "=== all experiments: $(( $(date +%s) - t0 )) s"
py=python3
if ! "$py" -c 'import matplotlib' 2>/dev/null && [[ -x /usr/bin/python3 ]]; then py=/usr/bin/python3; fi
"$py" scripts/make_report.py --results "$results" --out "$report"
echo "report: $report/REPORT.md (results in $results/)"
