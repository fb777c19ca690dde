#!/usr/bin/env python3
"""check_results.py — validate oomlab results files (reports/results/*.json): the results
schema, each experiment's summary schema (oomlab_report/results.py, schema.py) and the
provenance of a committed result: a clean tree at a commit in the history
(oomlab_report/provenance.py; the results awaiting their rerun are listed with their reason in
the provenance_exceptions.json beside the folder, reported as pending, and the list may only shrink).
Usage: check_results.py [--experiments DIR] [--schema-only] [FILE_OR_DIR ...]
(default: reports/results; --schema-only skips provenance, for work in progress such as the
main job's results/quick/). Exit 1 on error.
"""
import argparse
import sys
from pathlib import Path

from oomlab_report.provenance import EXCEPTIONS_FILE, load_exceptions, provenance_problem
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
    ap.add_argument("--schema-only", action="store_true",
                    help="check the schemas only, not the provenance (work in progress, results/quick/)")
    args = ap.parse_args(argv)
    files = collect(args.paths)
    if not files:
        print("check_results: no results files found (nothing to check)")
        return 0
    failed = pending = 0
    for path in files:
        try:
            doc = load_results(path, args.experiments)
        except ResultsError as exc:
            failed += 1
            print(f"FAIL {exc}")
            continue
        what = f"{path} ({doc['experiment']}, {len(doc['points'])} points, verdict {doc['verdict']['status']})"
        status = "ok" if args.schema_only else check_provenance(path, doc)
        failed += status == "FAIL"
        pending += status.startswith("pending")
        print(f"{status.split(':')[0]:<7} {what}{status[len('pending'):] if status.startswith('pending') else ''}")
    print(f"check_results: {len(files) - failed}/{len(files)} valid"
          + (f", {pending} awaiting a rerun from a clean commit ({EXCEPTIONS_FILE})" if pending else ""))
    return 1 if failed else 0


def check_provenance(path, doc):
    """"ok", "pending: why" (a listed exception that still needs it) or "FAIL" (printing why)."""
    path = Path(path)
    try:
        exceptions = load_exceptions(path.parent)
    except ValueError as exc:
        print(f"FAIL {exc}")
        return "FAIL"
    problem = provenance_problem(doc, REPO_ROOT)
    listed = exceptions.get(path.name)
    if problem and listed:
        return f"pending: {problem} ({listed})"
    if problem:
        print(f"FAIL {path}: {problem}: a committed result comes from a clean tree at a commit in the "
              "history (commit first, then run it)")
        return "FAIL"
    if listed:
        print(f"FAIL {path}: its provenance is clean now: remove it from {EXCEPTIONS_FILE}")
        return "FAIL"
    return "ok"


if __name__ == "__main__":
    sys.exit(main())
