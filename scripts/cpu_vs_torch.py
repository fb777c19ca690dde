#!/usr/bin/env python3
"""cpu_vs_torch.py — oomlab's CPU training step beside PyTorch eager's, measured in one run.

For each model: R rounds; each round runs `oomlab train` (synthetic data, the family recipe,
--steps warmup+steps, no evaluation) and the same step in PyTorch (scripts/torch_models.py's
twin, the same batch shape, optimizer and hyper-parameters, host clock per step) in
separate processes, alternating which goes first. Each side's figure for a round is the
median of its timed steps (oomlab's step_time_s.median, which skips the first step; PyTorch
after --warmup steps); the ratio oomlab / PyTorch is reported per round and as the median
over rounds. Every round is kept in the output (no best-of). Load is screened: the run waits
up to --wait-quiet seconds for the 1-minute load average to fall to --max-load (0.5), refuses
to start above it unless --force, and records the load before each round (the previous
round's own work shows in it).

Cases (issue 18): resnet20 1x28x28 b128 (SGD), resnet18 3x64x64 b32 (SGD), bert-mini seq 128
b32 (AdamW, lengths uniform in [64, 128] as oomlab's synthetic-seq, padding masked).
Usage: python3 scripts/cpu_vs_torch.py [--oomlab build/oomlab] [--models resnet20,resnet18,bert-mini]
         [--rounds 3] [--steps 10] [--warmup 3] [--json reports/benchmarks/cpu_vs_torch.json]
Skips with a message (exit 0) where torch is not installed. Exit 2 on bad usage.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oomlab_report.atomic import write_json_atomic
from oomlab_report.host import add_bench_args, oomlab_sha, quiet_gate, run_header

HERE = Path(__file__).resolve().parent
CASES = {  # model -> (oomlab flags, torch recipe)
    "resnet20": (["--dataset", "synthetic", "--input", "1,28,28", "--batch", "128"],
                 {"input": (1, 28, 28), "batch": 128, "opt": "sgd"}),
    "resnet18": (["--dataset", "synthetic", "--input", "3,64,64", "--batch", "32"],
                 {"input": (3, 64, 64), "batch": 32, "opt": "sgd"}),
    "bert-mini": (["--dataset", "synthetic-seq", "--seq-len", "128", "--batch", "32"],
                  {"seq_len": 128, "batch": 32, "opt": "adamw"}),
}


def torch_worker(model_name, steps, warmup):
    """Runs in a child process: the PyTorch step, prints {"median": s, "times": [...]}."""
    import torch
    from torch_models import build
    rec = CASES[model_name][1]
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    b = rec["batch"]
    if "seq_len" in rec:
        t = rec["seq_len"]
        model = build(torch, model_name, 2, seq_len=t, dropout=0.1)
        batches = []
        for _ in range(4):
            ids = torch.randint(1, 1000, (b, t), generator=g)
            lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
            ids[torch.arange(t)[None, :] >= lengths[:, None]] = 0
            batches.append(((ids, (ids != 0).long()), torch.randint(0, 2, (b,), generator=g)))
        opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
        fwd = lambda x: model(input_ids=x[0], attention_mask=x[1]).logits
    else:
        model = build(torch, model_name, 10, input_chw=rec["input"])
        batches = [(torch.randn((b,) + rec["input"], generator=g), torch.randint(0, 10, (b,), generator=g))
                   for _ in range(4)]
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        fwd = model
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for i in range(warmup + steps):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(fwd(x), y)
        loss.backward()
        opt.step()
        loss.item()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"median": statistics.median(times), "times": times, "threads": torch.get_num_threads(),
                      "torch": torch.__version__}))


def run_oomlab(oomlab, model, steps, warmup, tmp):
    out = Path(tmp) / f"oomlab_{model}.json"
    cmd = [oomlab, "train", "--model", model, *CASES[model][0], "--steps", str(steps + warmup), "--eval-batches", "0",
           "--quiet", "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    doc = json.loads(out.read_text())
    return doc["metrics"]["step_time_s"]["median"], doc["config"]["optimizer"], oomlab_sha(doc)


def run_torch(model, steps, warmup):
    proc = subprocess.run([sys.executable, __file__, "--torch-worker", model, "--steps", str(steps), "--warmup",
                           str(warmup)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"torch worker for {model}: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_bench_args(p, str(HERE.parent / "build" / "oomlab"))
    p.add_argument("--models", default=",".join(CASES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--torch-worker", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.torch_worker:
        torch_worker(a.torch_worker, a.steps, a.warmup)
        return 0
    models = [m for m in a.models.split(",") if m]
    if any(m not in CASES for m in models) or a.rounds < 1 or a.steps < 3 or a.warmup < 1:
        print(f"cpu_vs_torch: error: models from {list(CASES)}, --rounds >= 1, --steps >= 3, --warmup >= 1",
              file=sys.stderr)
        return 2
    missing = [m for m in ("torch", "torchvision", "transformers") if importlib.util.find_spec(m) is None]
    if missing:   # the workers import them; say so early and clearly here
        print(f"cpu_vs_torch: skipped: no module {', '.join(missing)} (needs torch, torchvision, transformers)")
        return 0
    gate = quiet_gate("cpu_vs_torch", a)
    if gate is None:
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="oomlab-vs-torch-") as tmp:
        for m in models:
            rounds = []
            for r in range(a.rounds):
                load = os.getloadavg()[0]
                order = ("oomlab", "torch") if r % 2 == 0 else ("torch", "oomlab")
                got = {}
                for side in order:
                    if side == "oomlab":
                        got["oomlab"], optimizer, sha = run_oomlab(a.oomlab, m, a.steps, a.warmup, tmp)
                    else:
                        got["torch"] = run_torch(m, a.steps, a.warmup)
                rounds.append({"round": r, "first": order[0], "load_avg_1m": load, "oomlab_s": got["oomlab"],
                               "torch_s": got["torch"]["median"], "ratio": got["oomlab"] / got["torch"]["median"]})
                print(f"{m:10s} round {r}: oomlab {got['oomlab'] * 1e3:8.1f} ms  torch {got['torch']['median'] * 1e3:8.1f}"
                      f" ms  ratio {rounds[-1]['ratio']:.3f}  (load {load:.2f}, {order[0]} first)", flush=True)
            results.append({"model": m, "oomlab_flags": CASES[m][0], "optimizer": optimizer,
                            "torch_threads": got["torch"]["threads"], "torch_version": got["torch"]["torch"],
                            "rounds": rounds, "ratio_median": statistics.median(x["ratio"] for x in rounds)})
            print(f"{m:10s} median ratio oomlab/torch {results[-1]['ratio_median']:.3f}", flush=True)
    doc = {**run_header("cpu_vs_torch", a, gate, sha), "steps": a.steps, "warmup": a.warmup, "results": results}
    if a.json:
        write_json_atomic(a.json, doc)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
