#!/usr/bin/env python3
"""ranks_failure.py — a dead or hung rank must make the others fail clearly, never hang.

Starts tests/ranks_collectives' RanksFailure test on N ranks, where the last rank kills itself
(SIGKILL) or hangs before an all_reduce, and checks what the survivors did:
  * gloo: ranks are plain processes with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT); every survivor must print that it caught CommError (kill) or
    CommTimeoutError (hang) naming the collective, exit 0, and do so within the timeout.
  * mpi: under `mpirun -np N --oversubscribe`; a killed rank makes mpirun end the job
    (non-zero, its message naming the rank), a hung one trips the survivors' watchdog
    (exit 2, "did not complete within" naming the collective). Either way well within the timeout.
Usage: ranks_failure.py BINARY --backend gloo|mpi --scenario kill|hang [--ranks N]
       [--mpirun PATH] [--port P] [--timeout SECONDS]
"""
import argparse
import os
import signal
import subprocess
import sys
import time


def fail(msg, out=""):
    print(out)
    print(f"ranks_failure: FAILED: {msg}")
    sys.exit(1)


def run_gloo(a, env):
    procs = []
    for r in range(a.ranks):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(a.ranks), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(a.ranks),
                 MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
        procs.append(subprocess.Popen([a.binary, "--gtest_filter=RanksFailure.*"], env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    t0 = time.monotonic()
    outs = []
    for r, p in enumerate(procs[:-1]):
        try:
            outs.append(p.communicate(timeout=a.timeout + 30)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            fail(f"rank {r} still running {a.timeout + 30} s after the start: it hangs")
    elapsed = time.monotonic() - t0
    last = procs[-1]
    if last.poll() is None:
        last.send_signal(signal.SIGKILL)
    outs.append(last.communicate()[0])
    text = "\n".join(outs)
    want = "caught CommTimeoutError" if a.scenario == "hang" else "caught CommError"
    for r, p in enumerate(procs[:-1]):
        if p.returncode != 0:
            fail(f"rank {r} exited {p.returncode}", text)
        if f"rank {r} {want}" not in outs[r]:
            fail(f"rank {r} did not print '{want}'", text)
    print(text)
    print(f"ranks_failure: ok: gloo {a.scenario}: {a.ranks - 1} survivor(s) failed cleanly in {elapsed:.1f} s")


def run_mpi(a, env):
    cmd = [a.mpirun, "-np", str(a.ranks), "--oversubscribe", a.binary, "--gtest_filter=RanksFailure.*"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=a.timeout + 60)
    except subprocess.TimeoutExpired as e:
        fail(f"mpirun still running {a.timeout + 60} s after the start: the job hangs", str(e.output))
    elapsed = time.monotonic() - t0
    text = p.stdout
    if p.returncode == 0:
        fail("mpirun exited 0 although a rank died or hung", text)
    if a.scenario == "hang" and "did not complete within" not in text:
        fail("no survivor's watchdog reported 'did not complete within'", text)
    if a.scenario == "kill" and f"rank {a.ranks - 1}" not in text.lower():
        fail(f"mpirun's report does not name rank {a.ranks - 1}", text)
    print(text)
    print(f"ranks_failure: ok: mpi {a.scenario}: job ended with {p.returncode} in {elapsed:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--backend", choices=["gloo", "mpi"], required=True)
    ap.add_argument("--scenario", choices=["kill", "hang"], required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--port", type=int, default=29530)
    ap.add_argument("--timeout", type=float, default=5.0)
    a = ap.parse_args()
    env = dict(os.environ, OOMLAB_COMM=a.backend, OOMLAB_RANKS_SCENARIO=a.scenario,
               OOMLAB_COMM_TIMEOUT=str(a.timeout), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    (run_gloo if a.backend == "gloo" else run_mpi)(a, env)


if __name__ == "__main__":
    main()
