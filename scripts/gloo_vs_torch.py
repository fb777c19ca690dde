#!/usr/bin/env python3
"""gloo_vs_torch.py — oomlab's Gloo all-reduce beside PyTorch's (torch.distributed, gloo), one run.

Is oomlab's Gloo communicator slower than the one PyTorch users have? Each round runs
`oomlab allreduce-bench --backend gloo --ranks N` (its torchrun-style rank processes) and the
same sweep in torch.distributed's gloo process group (N spawned processes, one thread each),
alternating which goes first. Both sides time alike, as allreduce-bench does: a barrier, --iters
in-place float sum all-reduces, a barrier, the elapsed time over --iters, averaged over the ranks;
after --warmup untimed calls per size. The ratio oomlab / PyTorch is kept per size and round, and
its median over rounds per size. The load gate is cpu_vs_torch.py's (oomlab_report/host.py).

Usage: python3 scripts/gloo_vs_torch.py [--oomlab build/oomlab] [--ranks 2] [--min-bytes 4096]
         [--max-bytes 4194304] [--step-factor 4] [--iters 20] [--warmup 5] [--rounds 5]
         [--json reports/benchmarks/gloo_vs_torch.json]
Skips with a message (exit 0) where torch is not installed. Exit 2 on bad usage.
"""
import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oomlab_report.atomic import write_json_atomic
from oomlab_report.host import add_bench_args, oomlab_sha, quiet_gate, run_header

HERE = Path(__file__).resolve().parent


def sizes_of(a):
    out, s = [], a.min_bytes
    while s <= a.max_bytes:
        out.append(s)
        s *= a.step_factor
    return out


def torch_rank(rank, world, port, sizes, iters, warmup, queue):
    """One PyTorch rank: the sweep, timed as allreduce-bench times it; puts {bytes: us} on queue."""
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    times = {}
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        for _ in range(warmup):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dist.barrier()
        times[nbytes] = (time.perf_counter() - t0) / iters * 1e6
    queue.put((rank, times))
    dist.destroy_process_group()


def torch_worker(a):
    """Runs in a child process: spawns the ranks, prints {"time_us": {bytes: mean over ranks}, "torch": v}."""
    import torch
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sizes = sizes_of(a)
    procs = [ctx.Process(target=torch_rank, args=(r, a.ranks, port, sizes, a.iters, a.warmup, queue))
             for r in range(a.ranks)]
    for p in procs:
        p.start()
    per_rank = [queue.get(timeout=600)[1] for _ in procs]
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"torch ranks exited {[p.exitcode for p in procs]}")
    mean = {str(n): statistics.fmean(r[n] for r in per_rank) for n in sizes}
    print(json.dumps({"time_us": mean, "torch": torch.__version__}))


def run_torch(a):
    cmd = [sys.executable, __file__, "--torch-worker", "--ranks", str(a.ranks), "--min-bytes", str(a.min_bytes),
           "--max-bytes", str(a.max_bytes), "--step-factor", str(a.step_factor), "--iters", str(a.iters),
           "--warmup", str(a.warmup)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"torch worker: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_oomlab(a, tmp):
    out = Path(tmp) / "oomlab_gloo.json"
    cmd = [a.oomlab, "allreduce-bench", "--backend", "gloo", "--ranks", str(a.ranks), "--min-bytes", str(a.min_bytes),
           "--max-bytes", str(a.max_bytes), "--step-factor", str(a.step_factor), "--iters", str(a.iters),
           "--warmup", str(a.warmup), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    doc = json.loads(out.read_text())
    return {str(r["size_bytes"]): r["in_place"]["time_us"] for r in doc["metrics"]["rows"]}, oomlab_sha(doc)


def one_round(a, r, tmp):
    load = os.getloadavg()[0]
    order = ("oomlab", "torch") if r % 2 == 0 else ("torch", "oomlab")
    got = {}
    for side in order:
        if side == "oomlab":
            got["oomlab"], got["sha"] = run_oomlab(a, tmp)
        else:
            got["torch"] = run_torch(a)
    torch_us = got["torch"]["time_us"]
    ratio = {n: got["oomlab"][n] / torch_us[n] for n in torch_us}
    print(f"round {r} ({order[0]} first, load {load:.2f}): " +
          "  ".join(f"{n} B {got['oomlab'][n]:.0f}/{torch_us[n]:.0f} us" for n in torch_us), flush=True)
    return {"round": r, "first": order[0], "load_avg_1m": load, "oomlab_us": got["oomlab"], "torch_us": torch_us,
            "ratio": ratio}, got["sha"], got["torch"]["torch"]


def bad_usage(a):
    if a.ranks < 2 or a.rounds < 1 or a.iters < 1 or a.warmup < 0 or a.step_factor < 2:
        return "--ranks >= 2, --rounds >= 1, --iters >= 1, --warmup >= 0, --step-factor >= 2"
    if a.min_bytes < 4 or a.min_bytes % 4 or a.max_bytes < a.min_bytes:
        return "--min-bytes a positive multiple of 4 (float elements), --max-bytes >= --min-bytes"
    return ""


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_bench_args(p, str(HERE.parent / "build" / "oomlab"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--min-bytes", type=int, default=4096)
    p.add_argument("--max-bytes", type=int, default=4 << 20)
    p.add_argument("--step-factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if bad_usage(a):
        print(f"gloo_vs_torch: error: {bad_usage(a)}", file=sys.stderr)
        return 2
    if a.torch_worker:
        torch_worker(a)
        return 0
    if importlib.util.find_spec("torch") is None:
        print("gloo_vs_torch: skipped: no module torch")
        return 0
    gate = quiet_gate("gloo_vs_torch", a)
    if gate is None:
        return 2
    with tempfile.TemporaryDirectory(prefix="oomlab-gloo-") as tmp:
        rounds, shas, versions = zip(*(one_round(a, r, tmp) for r in range(a.rounds)))
    medians = {n: statistics.median(r["ratio"][n] for r in rounds) for n in rounds[0]["ratio"]}
    print("median ratio oomlab/torch: " + "  ".join(f"{n} B {v:.2f}" for n, v in medians.items()))
    doc = {**run_header("gloo_vs_torch", a, gate, shas[-1]), "torch_version": versions[-1], "ranks": a.ranks, "iters": a.iters, "warmup": a.warmup,
           "timing": "in-place float sum; barrier, iters calls, barrier; mean over ranks",
           "rounds": list(rounds), "ratio_median": medians}
    if a.json:
        write_json_atomic(a.json, doc)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
