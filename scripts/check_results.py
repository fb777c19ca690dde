#!/usr/bin/env python3
"""check_results.py — validate oomlab results files (reports/results/*.json): the results
schema, each experiment's summary schema (oomlab_report/results.py, schema.py) and the
provenance of a committed result: a clean tree at a commit in the history
(oomlab_report/provenance.py; the results awaiting their rerun are listed with their reason in
the provenance_exceptions.json beside the folder, reported as pending, and the list may only shrink).
GPU records (each folder of a results directory's gpu/, e.g. reports/results/gpu/<record>/;
a gpu/ folder or one record may also be named) are checked through their provenance.json:
present, with date and machine, a commit that is an ancestor of HEAD, no dirty tree or dry
run (a dirty tree only with a declared local patch), each declared local patch a file of the
record, and the record's oomlab results agreeing with it
(oomlab_report/provenance.py, gpu_record_problems); anything else is a FAIL.
Usage: check_results.py [--experiments DIR] [--schema-only] [FILE_OR_DIR ...]
(default: reports/results; --schema-only skips provenance, GPU records included, for work in
progress such as the main job's results/quick/). Exit 1 on error.
"""
import argparse
import json
import sys
from pathlib import Path

from oomlab_report.provenance import (EXCEPTIONS_FILE, gpu_record_problems, load_exceptions,
                                      provenance_problem)
from oomlab_report.results import REPO_ROOT, ResultsError, load_results


def collect(paths):
    files = []
    for p in paths:
        p = Path(p)
        if p.is_dir() and "gpu" in (p.name, p.parent.name):
            continue   # a GPU record or the gpu/ folder: gpu_records() finds them
        if p.is_dir():
            files.extend(sorted(p.glob("*.json")))
        elif p.exists():
            files.append(p)
        elif p.suffix != ".json":  # a results directory not created yet (git keeps no empty dirs)
            print(f"check_results: note: no directory {p}")
        else:
            raise SystemExit(f"check_results: {p}: no such file or directory")
    return files


def gpu_records(paths):
    """The GPU record folders among `paths`: a results directory's gpu/*/, a gpu/ folder's
    subfolders, or a record folder itself (a folder inside a gpu/ folder)."""
    records = []
    for p in map(Path, paths):
        if not p.is_dir():
            continue
        if (p / "gpu").is_dir():
            records.extend(sorted(d for d in (p / "gpu").iterdir() if d.is_dir()))
        elif p.name == "gpu":
            records.extend(sorted(d for d in p.iterdir() if d.is_dir()))
        elif p.parent.name == "gpu":
            records.append(p)
    return records


def check_gpu_records(records, schema_only):
    """Prints one line per GPU record (and its problems); returns the number that failed."""
    if schema_only:
        if records:
            print(f"note: {len(records)} GPU record(s) not checked (--schema-only)")
        return 0
    failed = 0
    for folder in records:
        problems = gpu_record_problems(folder, REPO_ROOT)
        if problems:
            failed += 1
            print(f"FAIL    {folder} (GPU record): " + "; ".join(problems))
            continue
        prov = json.loads((folder / "provenance.json").read_text(encoding="utf-8"))
        patched = sorted(r for r, i in (prov.get("runs") or {}).items() if isinstance(i, dict) and i.get("local_patch"))
        print(f"ok      {folder} (GPU record: {prov['machine']['gpu']}, {prov['date']}, commit "
              f"{prov['commit'][:12]}" + (f", local patch in {', '.join(patched)}" if patched else "") + ")")
    if records:
        print(f"check_results: {len(records) - failed}/{len(records)} GPU records valid")
    return failed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[str(REPO_ROOT / "reports" / "results")],
                    help="results files or directories (default: reports/results)")
    ap.add_argument("--experiments", default=str(REPO_ROOT / "experiments"),
                    help="the experiment folders, whose summary schemas apply (default: experiments/)")
    ap.add_argument("--schema-only", action="store_true",
                    help="check the schemas only, not the provenance (work in progress, results/quick/)")
    args = ap.parse_args(argv)
    files, records = collect(args.paths), gpu_records(args.paths)
    if not files and not records:
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
    if files:
        print(f"check_results: {len(files) - failed}/{len(files)} valid"
              + (f", {pending} awaiting a rerun from a clean commit ({EXCEPTIONS_FILE})" if pending else ""))
    gpu_failed = check_gpu_records(records, args.schema_only)
    return 1 if failed or gpu_failed else 0


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
