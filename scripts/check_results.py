#!/usr/bin/env python3
"""check_results.py — validate oomlab results files (reports/results/*.json): the results
schema and each experiment's summary schema (oomlab_report/results.py, schema.py).
Usage: check_results.py [--experiments DIR] [FILE_OR_DIR ...]   (default: reports/results).
Exit 1 on error.
"""
import argparse
import sys
from pathlib import Path

from oomlab_report.results import REPO_ROOT, ResultsError, load_results


def collect(paths):
    files = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(p.glob("*.json")))
        elif p.exists():
            files.append(p)
        elif p.suffix != ".json":  # a results directory not created yet (git keeps no empty dirs)
            print(f"check_results: note: no directory {p}")
        else:
            raise SystemExit(f"check_results: {p}: no such file or directory")
    return files


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[str(REPO_ROOT / "reports" / "results")],
                    help="results files or directories (default: reports/results)")
    ap.add_argument("--experiments", default=str(REPO_ROOT / "experiments"),
                    help="the experiment folders, whose summary schemas apply (default: experiments/)")
    args = ap.parse_args(argv)
    files = collect(args.paths)
    if not files:
        print("check_results: no results files found (nothing to check)")
        return 0
    failed = 0
    for path in files:
        try:
            doc = load_results(path, args.experiments)
        except ResultsError as exc:
            failed += 1
            print(f"FAIL {exc}")
            continue
        print(f"ok   {path} ({doc['experiment']}, {len(doc['points'])} points, "
              f"verdict {doc['verdict']['status']})")
    print(f"check_results: {len(files) - failed}/{len(files)} valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
