#!/usr/bin/env python3
"""ddp_processes.py — `oomlab train --parallel ddp` on real launchers against its thread form.

Runs the same small training (mlp on synthetic images, 6 steps, per-rank batch 16) as
  * 2 rank threads in one process (local communicator),
  * `mpirun -np 2` processes with --backend mpi, and with --backend gloo (rendezvous on
    MASTER_PORT), when those backends are in the build,
  * one device at the global batch (32), and 2 gloo ranks this oomlab starts itself,
and checks: the DDP runs are bit-identical (2 ranks: an all-reduce of two values is one
addition whatever the algorithm, and division by 2 is exact), and equal the single device's
final test loss to float32 rounding; a checkpoint of the 2-rank run resumed on 1 device at the
same global batch ends where the uninterrupted 2-rank run ends; a rank whose model differs
makes every rank exit 2 naming it, without hanging; only rank 0 writes the results file.
Usage: ddp_processes.py OOMLAB --mpirun PATH --port P [--backends mpi,gloo]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

COMMON = ["train", "--model", "mlp", "--dataset", "synthetic", "--synthetic-size", "256", "--steps", "6",
          "--eval-batches", "-1", "--quiet", "--seed", "3"]


def fail(msg, out=""):
    print(out)
    print(f"ddp_processes: FAILED: {msg}")
    sys.exit(1)


def run(cmd, env=None, expect=0, timeout=240):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != expect:
        fail(f"exit {p.returncode} (wanted {expect}): {' '.join(cmd)}", p.stdout + p.stderr)
    return p.stdout + p.stderr


def metrics(path):
    m = json.load(open(path))["metrics"]
    return m["history"]["train_loss"], m["history"]["epochs"][-1]["test_loss"]


def close(a, b, rel=1e-5):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("oomlab")
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--backends", default="mpi,gloo")
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", MASTER_PORT=str(a.port))
    tmp = tempfile.mkdtemp(prefix="oomlab_ddp_")
    try:
        threads = os.path.join(tmp, "threads.json")
        run([a.oomlab] + COMMON + ["--batch", "16", "--parallel", "ddp", "--devices", "2", "--json", threads])
        ref_loss, ref_test = metrics(threads)
        one = os.path.join(tmp, "one.json")
        run([a.oomlab] + COMMON + ["--batch", "32", "--json", one])
        _, one_test = metrics(one)
        if not close(one_test, ref_test):
            fail(f"DDP over 2 threads ends at test loss {ref_test}, one device at batch 32 at {one_test}")
        print(f"threads: test loss {ref_test}; one device: {one_test}")
        for backend in [b for b in a.backends.split(",") if b]:
            out = os.path.join(tmp, f"{backend}.json")
            log = run([a.mpirun, "-np", "2", "--oversubscribe", a.oomlab] + COMMON +
                      ["--batch", "16", "--parallel", "ddp", "--backend", backend, "--json", out], env=env)
            loss, test = metrics(out)
            if loss != ref_loss or test != ref_test:
                fail(f"{backend} processes differ from threads: {loss} / {test} vs {ref_loss} / {ref_test}", log)
            if log.count("wrote ") != 1:
                fail(f"{backend}: the results file must be written once (by rank 0)", log)
            print(f"{backend} processes: bit-identical to the threads")

        # Without a launcher, --backend gloo starts its own rank processes (torchrun-style).
        if "gloo" in a.backends.split(","):
            out = os.path.join(tmp, "self.json")
            log = run([a.oomlab] + COMMON + ["--batch", "16", "--parallel", "ddp", "--devices", "2",
                                             "--backend", "gloo", "--json", out])
            _, test = metrics(out)
            if not close(test, ref_test) or log.count("wrote ") != 1:
                fail(f"self-launched gloo ranks: test loss {test} vs {ref_test}, results written "
                     f"{log.count('wrote ')} times", log)
            print(f"self-launched gloo ranks: {test}")

        # Resume on another world size at the same global batch.
        save = os.path.join(tmp, "ck")
        full = os.path.join(tmp, "full.json")
        run([a.oomlab] + COMMON + ["--batch", "16", "--parallel", "ddp", "--devices", "2", "--save", save,
                                   "--save-every", "3", "--json", full])
        resumed = os.path.join(tmp, "resumed.json")
        run([a.oomlab] + COMMON + ["--batch", "32", "--resume", os.path.join(save, "step-3"), "--json", resumed])
        _, full_test = metrics(full)
        _, res_test = metrics(resumed)
        if not close(full_test, res_test):
            fail(f"resumed on 1 device: test loss {res_test}, uninterrupted 2 ranks {full_test}")
        print(f"2 ranks -> 1 device resume: {res_test} vs {full_test}")

        # A rank with another model: every rank exits 2 naming it (MPMD: rank 1 runs resnet20).
        if "mpi" in a.backends.split(","):
            base = ["--dataset", "synthetic", "--input", "1,28,28", "--synthetic-size", "64", "--batch", "4",
                    "--steps", "1", "--quiet", "--parallel", "ddp", "--backend", "mpi"]
            cmd = [a.mpirun, "-np", "1", a.oomlab, "train", "--model", "resnet20"] + base + \
                  [":", "-np", "1", a.oomlab, "train", "--model", "resnet56"] + base
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            out = p.stdout + p.stderr
            if p.returncode == 0 or out.count("rank 1's model differs from rank 0's") < 2:
                fail(f"a rank with another model: exit {p.returncode}, both ranks must name it", out)
            print("different model on rank 1: both ranks refused it")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ddp_processes: OK")


if __name__ == "__main__":
    main()
