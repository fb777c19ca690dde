#!/usr/bin/env python3
"""attention_vs_torch.py — CPU attention forward + backward: oomlab's eager and fused beside
PyTorch's scaled_dot_product_attention, measured in one run (issue 31: "CPU step time beside
PyTorch's CPU SDPA").

Shape: batch 1, 12 heads, head dim 64 (BERT-base's), float32, training, per sequence length
and dropout (10%, BERT's, and 0). Per round and case: oomlab's bench_attention (one process:
its eager and fused alternate inside, 10 iterations each, medians) and PyTorch in this
process (the math backend, i.e. eager, and the default dispatch; `--warmup` untimed then
`--iters` timed forward + backward steps, medians), the two sides alternating which goes
first. PyTorch's CPU flash kernel refuses dropout (sdp_utils_cpp.cpp's check_for_dropout):
with dropout the default dispatch runs the math path, and the record says which backend ran
(`torch_sdpa_backend`: "flash" when the flash kernel accepts the case, else "math").
Both sides use --threads threads (OMP_NUM_THREADS for oomlab, torch.set_num_threads here).
The file records bench_attention's provenance (its Google Benchmark context's oomlab_* keys:
the build's git sha and dirty flag, host, CPU, BLAS) as "oomlab_context".

Usage: python3 scripts/attention_vs_torch.py --bench build/bench_attention [--seqs 512,1024,2048]
         [--dropouts 10,0] [--rounds 3] [--iters 5] [--warmup 2] [--threads N] --json OUT
Without PyTorch: prints that it skips and exits 0 (no output file), as torch_parity does.
Exit 2 on bad usage or when bench_attention fails.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from oomlab_report.atomic import write_json_atomic


def die(msg):
    print(f"attention_vs_torch: error: {msg}", file=sys.stderr)
    sys.exit(2)


def int_list(text, name, lo, hi):
    """Comma-separated integers in [lo, hi]."""
    try:
        vals = [int(v) for v in text.split(",") if v]
    except ValueError:
        die(f"{name} takes comma-separated integers, got {text!r}")
    if not vals or min(vals) < lo or max(vals) > hi:
        die(f"{name} takes integers in [{lo}, {hi}], got {text!r}")
    return vals


def oomlab_case(bench, seq, drop, threads):
    """bench_attention's eager_ms and fused_ms for one (seq, dropout %) case."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    cmd = [bench, f"--benchmark_filter=BM_attention_eager_vs_fused/{seq}/{drop}/", "--benchmark_format=json"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        die(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    doc = json.loads(r.stdout)
    rows = doc.get("benchmarks", [])
    if len(rows) != 1:
        die(f"bench_attention has no case {seq}/{drop} (rows: {[b.get('name') for b in rows]})")
    context = {k: v for k, v in (doc.get("context") or {}).items() if k.startswith("oomlab_") or k == "load_avg"}
    return {"oomlab_eager_ms": rows[0]["eager_ms"], "oomlab_fused_ms": rows[0]["fused_ms"], "oomlab_context": context}


def torch_case(torch, seq, drop, iters, warmup):
    """Median ms of PyTorch's math backend and its default dispatch, and which ran."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(seq)
    q, k, v = (torch.rand(1, 12, seq, 64, generator=gen).mul_(2).sub_(1).requires_grad_() for _ in range(3))
    p = drop / 100.0

    def timed(backends):
        times = []
        for i in range(warmup + iters):
            for t in (q, k, v):
                t.grad = None
            t0 = time.perf_counter()
            with sdpa_kernel(backends):
                F.scaled_dot_product_attention(q, k, v, dropout_p=p).sum().backward()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)

    try:   # does the CPU flash kernel take this case? (it refuses dropout)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            F.scaled_dot_product_attention(q, k, v, dropout_p=p).sum().backward()
        backend = "flash"
    except RuntimeError:
        backend = "math"
    return {"torch_math_ms": timed([SDPBackend.MATH]),
            "torch_sdpa_ms": timed([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]), "torch_sdpa_backend": backend}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--seqs", default="512,1024,2048")
    ap.add_argument("--dropouts", default="10,0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    seqs, drops = int_list(a.seqs, "--seqs", 1, 1 << 16), int_list(a.dropouts, "--dropouts", 0, 99)
    if min(a.rounds, a.iters, a.threads) < 1 or a.warmup < 0:
        die("--rounds, --iters and --threads must be >= 1, --warmup >= 0")
    if not os.access(a.bench, os.X_OK):
        die(f"{a.bench} is not an executable bench_attention")
    try:
        import torch
    except ImportError:
        print("attention_vs_torch: skipped: PyTorch is not installed")
        return 0
    torch.set_num_threads(a.threads)
    cases, context = [], {}
    for seq in seqs:
        for drop in drops:
            rounds = []
            for r in range(a.rounds):
                sides = [lambda: oomlab_case(a.bench, seq, drop, a.threads),
                         lambda: torch_case(torch, seq, drop, a.iters, a.warmup)]
                rec = {"round": r, "oomlab_first": r % 2 == 0}
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    rec.update(side())
                context = rec.pop("oomlab_context", None) or context
                rounds.append(rec)
            med = {k: statistics.median(x[k] for x in rounds)
                   for k in ("oomlab_eager_ms", "oomlab_fused_ms", "torch_math_ms", "torch_sdpa_ms")}
            cases.append({"seq": seq, "dropout": drop / 100.0, "rounds": rounds, "median_ms": med,
                          "torch_sdpa_backend": rounds[0]["torch_sdpa_backend"],
                          "oomlab_fused_over_torch_sdpa": med["oomlab_fused_ms"] / med["torch_sdpa_ms"]})
            print(f"s={seq} p={drop}%: oomlab eager {med['oomlab_eager_ms']:.1f} fused {med['oomlab_fused_ms']:.1f} ms; "
                  f"torch math {med['torch_math_ms']:.1f} sdpa({cases[-1]['torch_sdpa_backend']}) "
                  f"{med['torch_sdpa_ms']:.1f} ms", flush=True)
    write_json_atomic(a.json, {"shape": {"batch": 1, "heads": 12, "head_dim": 64, "dtype": "float32"},
                               "threads": a.threads, "torch": torch.__version__, "rounds": a.rounds,
                               "iters": a.iters, "warmup": a.warmup, "cases": cases,
                               "oomlab_context": context})   # bench_attention's build and machine, last case
    return 0


if __name__ == "__main__":
    sys.exit(main())
