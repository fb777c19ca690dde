#!/usr/bin/env bash
# oomlab's main job: set up + build, run every experiment in experiments/ (quick profile
# by default, on each experiment's default device), then regenerate figures and
# reports/REPORT.md from reports/results/.
# Usage: bash scripts/run_experiments.sh [quick|full]
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-quick}"
build_dir="${OOMLAB_BUILD_DIR:-build}"
OOMLAB_BUILD_DIR="$build_dir" bash scripts/setup.sh
for dir in experiments/[0-9][0-9]_*/; do
  [[ -f "$dir/experiment.json" ]] || continue
  echo "=== oomlab run $dir --profile $profile"
  "$build_dir/oomlab" run "$dir" --profile "$profile"
done
py=python3
if ! "$py" -c 'import matplotlib' 2>/dev/null && [[ -x /usr/bin/python3 ]]; then py=/usr/bin/python3; fi
"$py" scripts/make_report.py --results reports/results --out reports
