#!/usr/bin/env python3
"""plan_calibration.py — fits `oomlab plan`'s step-time model on the GPU records' measured
oomlab step times and measures its leave-one-configuration-out error (issue 52).

Data: for every GPU record under reports/results/gpu/ (folder names start with the card:
h100-, h200-) and every kit tag whose oomlab step was timed (points.json:
TAG.oomlab.median_ms), the newest record's time per (card, tag) (records in folder-name
order, the later wins). Left out: tags whose flags (scripts/gpu_run.sh's FLAGS) change what
the meta step cannot see (--cuda-graphs, --cudnn-benchmark, --pin-memory) and tags run
under an implementation switch (gpu_run.sh's ENVS: not the default build's kernels).

Features: `oomlab estimate <the tag's model flags> --gpu CARD --allow-tf32 MODE --json`
(metrics.time_model.features_ms, experiments/plan/time_model.h: each term the milliseconds
the step's counted work would take at the card's datasheet figure). The optimizer is the
family's recipe: SGD for the CNNs, AdamW for BERT and the imported transformers.

Model: measured ms = sum of c_k x feature_k, c_k >= 0, fitted by non-negative least
squares on relative residuals (each row divided by its measured time), one coefficient set
for every card. Leave-one-configuration-out: each tag is left out on every card at once,
the rest refitted, and its pairs predicted; the relative errors' median and worst are
printed and written, with the fit, every pair and its residual, as JSON (--out), which
experiments/plan/time_model.cpp reads.

Usage: python3 scripts/plan_calibration.py [--build build] [--out FILE]
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from datetime import date

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNSEEN = ("--cuda-graphs", "--cudnn-benchmark", "--pin-memory")
CARDS = {"h100": "h100-sxm", "h200": "h200"}   # record prefix -> oomlab plan's --gpu name
MODEL_FLAGS = ("--model", "--batch", "--seq-len", "--amp", "--checkpoint", "--attention", "--fuse-relu")


def kit_text():
    return open(os.path.join(ROOT, "scripts", "gpu_run.sh")).read()


def kit_flags(text):
    return {t: f.replace("$kit/", "") for t, f in re.findall(r'^\s*\[(\w+)\]="([^"]*)"', text, re.M)}


def switched_tags(text):
    """Tags gpu_run.sh runs under an implementation switch (its ENVS table)."""
    start = text.index("declare -A ENVS=(")
    body = text[start:text.index(")\n", start)]
    return set(re.findall(r'\[(\w+)\]=', body))


def measured_times():
    """(card, tag) -> (record, median ms), the newest record (folder name order) per pair."""
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "reports", "results", "gpu", "*", "points.json"))):
        record = os.path.basename(os.path.dirname(path))
        card = record.split("-")[0]
        points = json.load(open(path))
        if card not in CARDS or not isinstance(points, dict):
            continue
        for tag, p in points.items():
            ms = (p.get("oomlab") or {}).get("median_ms") if isinstance(p, dict) else None
            if ms:
                out[(card, tag)] = (record, float(ms))
    return out


def estimate_args(flags):
    """The flags `oomlab estimate` takes from a train line, and the recipe's optimizer."""
    words = flags.split()
    keep, i = [], 0
    while i < len(words):
        has_value = i + 1 < len(words) and not words[i + 1].startswith("--")
        if words[i] in MODEL_FLAGS and has_value:
            keep += words[i:i + 2]
        elif words[i] == "--channels-last":
            keep.append(words[i])
        i += 2 if has_value else 1
    model = keep[keep.index("--model") + 1]
    transformer = "bert" in model or "gpt2" in model
    return keep + ["--optimizer", "adamw" if transformer else "sgd"]


def allow_tf32(flags):
    m = re.search(r"--allow-tf32 (\w+)", flags)
    return m.group(1) if m else "cudnn"   # train's default, PyTorch's


def precision(flags):
    """The precision the planner names the run's (planner.h): fp32, tf32, bf16, fp16, half."""
    m = re.search(r"--amp (\w+)", flags)
    if m:
        return m.group(1)
    if "--half" in flags:
        return "half"
    return "tf32" if allow_tf32(flags) == "all" else "fp32"


def features(oomlab, args, card, tf32):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "e.json")
        subprocess.run([oomlab, "estimate", *args, "--gpu", card, "--allow-tf32", tf32, "--json", out], check=True,
                       capture_output=True, text=True)
        return json.load(open(out))["metrics"]["time_model"]["features_ms"]


def nnls(rows, b, iters=200):
    """min ||A x - b||, x >= 0 (Lawson and Hanson's active set), A given as rows."""
    n = len(rows[0])
    x, passive = [0.0] * n, set()

    def solve(cols):   # least squares over the columns `cols` (normal equations, Gauss-Jordan)
        cols = sorted(cols)
        m = [[sum(r[i] * r[j] for r in rows) for j in cols] + [sum(r[i] * bb for r, bb in zip(rows, b))]
             for i in cols]
        k = len(cols)
        for c in range(k):
            p = max(range(c, k), key=lambda r: abs(m[r][c]))
            m[c], m[p] = m[p], m[c]
            if abs(m[c][c]) < 1e-300:
                continue
            for r in range(k):
                if r != c:
                    f = m[r][c] / m[c][c]
                    m[r] = [a - f * bb for a, bb in zip(m[r], m[c])]
        z = [0.0] * n
        for c, col in enumerate(cols):
            z[col] = m[c][k] / m[c][c] if abs(m[c][c]) >= 1e-300 else 0.0
        return z

    for _ in range(iters):
        resid = [bb - sum(r[j] * x[j] for j in range(n)) for r, bb in zip(rows, b)]
        w = [sum(r[j] * e for r, e in zip(rows, resid)) for j in range(n)]
        free = [j for j in range(n) if j not in passive and w[j] > 1e-12]
        if not free:
            break
        passive.add(max(free, key=lambda j: w[j]))
        while True:
            z = solve(passive)
            if all(z[j] > 0 for j in passive):
                x = z
                break
            alpha = min(x[j] / (x[j] - z[j]) for j in passive if z[j] <= 0)
            x = [x[j] + alpha * (z[j] - x[j]) for j in range(n)]
            passive = {j for j in passive if x[j] > 1e-15}
    return x


def fit(pairs, names):
    """Coefficients (name -> c >= 0) minimising the pairs' relative residuals."""
    rows = [[p["features_ms"][k] / p["ms"] for k in names] for p in pairs]
    c = nnls(rows, [1.0] * len(pairs))
    return dict(zip(names, c))


def predict(coef, f):
    return sum(coef[k] * f.get(k, 0.0) for k in coef)


def provenance():
    def git(*a):
        return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "--short", "HEAD"), "clean_tree": git("status", "--porcelain") == "",
            "date": date.today().isoformat(),
            "machine": "FLOPs, launches and bytes counted on meta (any machine); times are the GPU records'",
            "command": "python3 scripts/plan_calibration.py --out reports/plan_calibration.json"}


def collect(oomlab):
    text = kit_text()
    flags, switched = kit_flags(text), switched_tags(text)
    pairs = []
    for (card, tag), (record, ms) in sorted(measured_times().items()):
        f = flags.get(tag)
        if not f or "--model " not in f or tag in switched or any(u in f for u in UNSEEN):
            continue
        args = estimate_args(f)
        pairs.append({"card": card, "tag": tag, "record": record, "ms": ms, "estimate": " ".join(args),
                      "allow_tf32": allow_tf32(f), "precision": precision(f), "features_ms": features(oomlab, args, CARDS[card], allow_tf32(f))})
    return pairs


def evaluate(pairs):
    names = sorted({k for p in pairs for k in p["features_ms"]})
    coef = fit(pairs, names)
    for p in pairs:
        p["fitted_ms"] = predict(coef, p["features_ms"])
        p["residual"] = (p["fitted_ms"] - p["ms"]) / p["ms"]
    for tag in sorted({p["tag"] for p in pairs}):
        rest = [q for q in pairs if q["tag"] != tag]
        loo = fit(rest, names)
        for p in pairs:
            if p["tag"] == tag:
                p["loo_ms"] = predict(loo, p["features_ms"])
                p["loo_error"] = abs(p["loo_ms"] - p["ms"]) / p["ms"]
    errors = [p["loo_error"] for p in pairs]
    seen = {k: sum(1 for p in pairs if p["features_ms"].get(k, 0) > 0) for k in names}
    summary = {"pairs": len(pairs), "configurations": len({p["tag"] for p in pairs}),
               "median_relative_error": statistics.median(errors), "worst_relative_error": max(errors),
               "fit_median_relative_residual": statistics.median(abs(p["residual"]) for p in pairs),
               "left_out": "each configuration (tag) on every card at once"}
    precisions = sorted({p["precision"] for p in pairs})
    return {"model": {"features": names, "coefficients": coef, "seen": seen, "precisions": precisions},
            "summary": summary, "pairs": pairs}


def print_table(cal):
    print(f"{'card':5} {'tag':22} {'measured ms':>11} {'fitted':>8} {'LOO ms':>8} {'error':>7}")
    for p in cal["pairs"]:
        print(f"{p['card']:5} {p['tag']:22} {p['ms']:11.1f} {p['fitted_ms']:8.1f} {p['loo_ms']:8.1f} "
              f"{100 * p['loo_error']:6.1f}%")
    print("coefficients: " + ", ".join(f"{k} {v:.3g}" for k, v in cal["model"]["coefficients"].items()))
    s = cal["summary"]
    print(f"leave-one-configuration-out over {s['pairs']} pairs ({s['configurations']} configurations): "
          f"median error {100 * s['median_relative_error']:.1f}%, worst {100 * s['worst_relative_error']:.1f}%")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("OOMLAB_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    pairs = collect(os.path.join(a.build, "oomlab"))
    if len(pairs) < 2:
        print("plan_calibration: fewer than two measured pairs", file=sys.stderr)
        return 2
    cal = {"provenance": provenance(), **evaluate(pairs)}
    print_table(cal)
    if a.out:
        tmp = a.out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(cal, fh, indent=1)
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
