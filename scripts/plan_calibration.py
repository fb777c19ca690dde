#!/usr/bin/env python3
"""plan_calibration.py — how well FLOPs predict oomlab's measured GPU step times: the data
`oomlab plan`'s time model is to be fitted on, and its leave-one-out error (issue 52).

For every GPU record under reports/results/gpu/ (folder names start with the card: h100-,
h200-) and every kit tag whose oomlab step was timed (points.json: TAG.oomlab.median_ms) and
whose flags (scripts/gpu_run.sh's FLAGS) change nothing the FLOP count cannot see (no
--cuda-graphs, --channels-last, --cudnn-benchmark, --pin-memory, --fuse-relu), the newest
record's time per (card, tag) is paired with the step's matrix FLOPs counted on meta by
`oomlab estimate` (metrics.step_flops; the optimizer: the model family's recipe, SGD for the
CNNs, AdamW for BERT and the imported transformers). The precision class is the tag's: fp32
(--allow-tf32 none), tf32 (--allow-tf32 all), bf16 / fp16 (--amp).

Model: time = FLOPs / T per (card, class), T the least-squares throughput
(k = sum(F t) / sum(F^2), T = 1 / k). Leave-one-out: each pair predicted from the others of
its (card, class); the relative errors' median and worst are printed and, with every pair,
written as JSON (--out). A class with one pair on a card has no leave-one-out prediction.

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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNSEEN = ("--cuda-graphs", "--channels-last", "--cudnn-benchmark", "--pin-memory", "--fuse-relu")


def kit_flags():
    """tag -> oomlab train flags, from gpu_run.sh's FLAGS table."""
    text = open(os.path.join(ROOT, "scripts", "gpu_run.sh")).read()
    return {t: f.replace("$kit/", "") for t, f in re.findall(r'^\s*\[(\w+)\]="([^"]*)"', text, re.M)}


def measured_times():
    """(card, tag) -> (record, median ms), the newest record (folder name order) per pair."""
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "reports", "results", "gpu", "*", "points.json"))):
        record = os.path.basename(os.path.dirname(path))
        card = record.split("-")[0]
        points = json.load(open(path))
        if not isinstance(points, dict):
            continue
        for tag, p in points.items():
            ms = (p.get("oomlab") or {}).get("median_ms") if isinstance(p, dict) else None
            if ms:
                out[(card, tag)] = (record, float(ms))
    return out


def precision_class(flags):
    if "--amp bf16" in flags:
        return "bf16"
    if "--amp fp16" in flags:
        return "fp16"
    return "tf32" if "--allow-tf32 all" in flags else "fp32"


def estimate_args(flags):
    """The flags `oomlab estimate` takes from a train line, and the recipe's optimizer."""
    words = flags.split()
    keep, i = [], 0
    while i < len(words):
        if words[i] in ("--model", "--batch", "--seq-len", "--amp", "--checkpoint", "--attention"):
            keep += words[i:i + 2]
        i += 2 if i + 1 < len(words) and not words[i + 1].startswith("--") else 1
    model = keep[keep.index("--model") + 1]
    transformer = "bert" in model or "gpt2" in model
    return keep + ["--optimizer", "adamw" if transformer else "sgd"]


def step_flops(oomlab, args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "e.json")
        subprocess.run([oomlab, "estimate", *args, "--json", out], check=True, capture_output=True, text=True)
        return sum(json.load(open(out))["metrics"]["step_flops"].values())


def fit_k(pairs):
    return sum(p["flops"] * p["ms"] for p in pairs) / sum(p["flops"] ** 2 for p in pairs)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("OOMLAB_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    oomlab = os.path.join(a.build, "oomlab")
    flags = kit_flags()
    pairs = []
    for (card, tag), (record, ms) in sorted(measured_times().items()):
        f = flags.get(tag)
        if not f or "--model " not in f or any(u in f for u in UNSEEN):
            continue
        args = estimate_args(f)
        pairs.append({"card": card, "tag": tag, "record": record, "class": precision_class(f), "ms": ms,
                      "estimate": " ".join(args), "flops": step_flops(oomlab, args)})
    errors = []
    for p in pairs:
        same = [q for q in pairs if q["card"] == p["card"] and q["class"] == p["class"] and q is not p]
        p["achieved_tflops"] = p["flops"] / (p["ms"] * 1e-3) / 1e12
        if same:
            p["loo_ms"] = p["flops"] * fit_k(same)
            p["loo_error"] = abs(p["loo_ms"] - p["ms"]) / p["ms"]
            errors.append(p["loo_error"])
    print(f"{'card':5} {'tag':22} {'class':5} {'measured ms':>11} {'TFLOP':>8} {'TFLOP/s':>8} {'LOO ms':>8} {'error':>7}")
    for p in pairs:
        loo = f"{p['loo_ms']:8.1f} {100 * p['loo_error']:6.1f}%" if "loo_ms" in p else f"{'-':>8} {'-':>7}"
        print(f"{p['card']:5} {p['tag']:22} {p['class']:5} {p['ms']:11.1f} {p['flops'] / 1e12:8.3f} "
              f"{p['achieved_tflops']:8.1f} {loo}")
    summary = {"pairs": len(pairs), "loo_predicted": len(errors),
               "median_relative_error": statistics.median(errors) if errors else None,
               "worst_relative_error": max(errors) if errors else None}
    print(f"leave-one-out over {len(errors)} of {len(pairs)} pairs: median error "
          f"{100 * summary['median_relative_error']:.1f}%, worst {100 * summary['worst_relative_error']:.1f}%"
          if errors else "no leave-one-out prediction (fewer than two pairs per card and class)")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"summary": summary, "pairs": pairs}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
