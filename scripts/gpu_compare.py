#!/usr/bin/env python3
"""Pair oomlab's and PyTorch's results of a GPU run (scripts/gpu_run.sh) and print the ratios.

Input: a folder with oomlab_<tag>.json (oomlab train --json), torch_<mode>_<tag>.json
(scripts/torch_reference.py, mode eager|compile) and bench_cuda.json (Google Benchmark).
Output (stdout): one row per tag with step-time medians, oomlab/PyTorch-eager step-time
ratio (the issue's bar: <= 1.0), peak allocated bytes of both and their ratio (bar: <= 1.0);
then the bandwidth rows of bench_cuda with pct_copy (bar: >= 80% at large sizes).
Also writes <folder>/comparison.json (strict JSON) with the same numbers.
Standard library only. Exit 1 when the folder holds no pair.
"""
import json
import os
import math
import sys
from pathlib import Path


def load(path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"gpu_compare: skipping {path.name}: {exc}", file=sys.stderr)
        return None


def median_s(doc):
    try:
        t = doc["metrics"]["step_time_s"]
        return t["median"] if t.get("count", 1) > 0 else None
    except (KeyError, TypeError):
        return None


def peak(doc):
    """allocated_bytes.all.peak: results schema 2 keeps it under memory.totals."""
    mem = (doc or {}).get("memory", {})
    return mem.get("totals", mem).get("allocated_bytes.all.peak")


PEAK_NOTE = ("PyTorch's max_memory_allocated includes the cuBLAS workspace it hands cuBLAS from its "
             "allocator (32 MiB per handle on Hopper); oomlab's cuBLAS workspace is cuBLAS-internal, "
             "outside allocated_bytes.all.peak: a peak ratio within ~1% of 1.0 is a tie")


def ratio(a, b):
    return a / b if a and b else None


def compare(folder):
    rows = []
    tags = {p.stem[len("oomlab_"):] for p in folder.glob("oomlab_*.json")}
    tags |= {p.stem.split("_", 2)[2] for p in folder.glob("torch_*_*.json")}
    for tag in sorted(tags):
        ours_path = folder / f"oomlab_{tag}.json"
        ours = load(ours_path) if ours_path.exists() else None
        eager = load(folder / f"torch_eager_{tag}.json") if (folder / f"torch_eager_{tag}.json").exists() else None
        comp = load(folder / f"torch_compile_{tag}.json") if (folder / f"torch_compile_{tag}.json").exists() else None
        if ours is None:   # oomlab failed here: keep PyTorch's figures, mark the row
            print(f"gpu_compare: {tag}: no usable oomlab result", file=sys.stderr)
            ours = {"oomlab_missing": True}
        row = {"tag": tag, "oomlab_step_s": median_s(ours), "torch_eager_step_s": median_s(eager),
               "torch_compile_step_s": median_s(comp), "oomlab_peak_allocated": peak(ours),
               "torch_peak_allocated": peak(eager),
               "device": ours.get("context", {}).get("device_properties", {}).get("device_name")}
        row["step_time_ratio_vs_eager"] = ratio(row["oomlab_step_s"], row["torch_eager_step_s"])
        row["step_time_ratio_vs_compile"] = ratio(row["oomlab_step_s"], row["torch_compile_step_s"])
        row["peak_allocated_ratio"] = ratio(row["oomlab_peak_allocated"], row["torch_peak_allocated"])
        if comp and "error" in comp.get("metrics", {}):
            row["torch_compile_error"] = comp["metrics"]["error"]
        rows.append(row)
    bench = []
    bpath = folder / "bench_cuda.json"
    if bpath.exists():
        doc = load(bpath) or {}
        for b in doc.get("benchmarks", []):
            if "GBps" in b:
                bench.append({"name": b["name"], "GBps": b["GBps"], "pct_copy": b.get("pct_copy")})
    return rows, bench


def fmt(x, scale=1.0, digits=2):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x * scale:.{digits}f}"


def main(argv):
    if len(argv) != 1:
        print("usage: gpu_compare.py RESULTS_FOLDER", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    rows, bench = compare(folder)
    print(f"{'point':32} {'oomlab ms':>10} {'eager ms':>10} {'ratio':>6} {'compile ms':>10} "
          f"{'oomlab MiB':>11} {'torch MiB':>10} {'ratio':>6}")
    for r in rows:
        print(f"{r['tag']:32} {fmt(r['oomlab_step_s'], 1e3):>10} {fmt(r['torch_eager_step_s'], 1e3):>10} "
              f"{fmt(r['step_time_ratio_vs_eager']):>6} {fmt(r['torch_compile_step_s'], 1e3):>10} "
              f"{fmt(r['oomlab_peak_allocated'], 2**-20, 1):>11} {fmt(r['torch_peak_allocated'], 2**-20, 1):>10} "
              f"{fmt(r['peak_allocated_ratio']):>6}")
    if rows:
        print(f"note: {PEAK_NOTE}")
    for b in bench:
        print(f"{b['name']:40} {fmt(b['GBps'], 1, 1):>10} GB/s {fmt(b['pct_copy'], 1, 1):>6} % of copy")
    doc = {"schema_version": 1, "points": rows, "bandwidth": bench, "peak_note": PEAK_NOTE}
    out = folder / "comparison.json"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, out)   # atomic: a reader never sees half a file
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
