"""host.py — what the benchmark scripts record about the machine, and their quiet-machine gate.

cpu_name() and cpu_identity() name the CPU (the VMs these runs land on differ between sessions);
wait_for_quiet() waits for the 1-minute load average to fall to a bound and says whether it did;
add_bench_args(), quiet_gate() and run_header() are the options, the gate and the record header that
every oomlab-beside-torch script shares.
"""
import datetime
import os
import platform
import sys
import time
from pathlib import Path


def cpu_identity():
    """Family, model and vector ISA of the CPU: the VMs these runs land on differ between sessions
    (the same "AMD EPYC" name has come with and without AVX-512), and both sides' kernels follow."""
    info = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("cpu family", "model") and key.replace(" ", "_") not in info:
                info[key.replace(" ", "_")] = value.strip()
            elif key == "flags":
                flags = set(value.split())
                info["simd"] = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile") if f in flags]
                break
    except OSError:
        pass
    return {"cpu_" + k if not k.startswith("cpu") else k: v for k, v in info.items()}


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def wait_for_quiet(max_load, wait_s, force):
    """Waits up to wait_s seconds (never when force) for the 1-minute load average to fall to
    max_load; returns (load now, seconds waited, quiet: whether it is at most max_load)."""
    waited = 0
    while os.getloadavg()[0] > max_load and waited < wait_s and not force:
        time.sleep(5)   # the 1-minute load average decays over about a minute after a busy spell
        waited += 5
    load = os.getloadavg()[0]
    return load, waited, load <= max_load


def add_bench_args(parser, default_oomlab):
    """The options every side-by-side script takes: the binary, the quiet gate and the JSON output."""
    parser.add_argument("--oomlab", default=default_oomlab)
    parser.add_argument("--max-load", type=float, default=0.5)
    parser.add_argument("--wait-quiet", type=int, default=180, help="seconds to wait for the load to fall first")
    parser.add_argument("--force", action="store_true", help="run even when the machine is not quiet")
    parser.add_argument("--json", default="")


def quiet_gate(name, a):
    """Checks the binary and waits for a quiet machine; returns (load, waited) or None after printing
    why the run cannot start (the caller exits 2)."""
    if not os.access(a.oomlab, os.X_OK):
        print(f"{name}: error: {a.oomlab} is not an executable oomlab", file=sys.stderr)
        return None
    load, waited, quiet = wait_for_quiet(a.max_load, a.wait_quiet, a.force)
    if not quiet and not a.force:
        print(f"{name}: error: 1-minute load average {load:.2f} > --max-load {a.max_load} after waiting "
              f"{waited} s: the machine is not quiet (find what runs, or --force and say so)", file=sys.stderr)
        return None
    return load, waited


def oomlab_sha(doc):
    """The commit an oomlab JSON document was made at, '-dirty' when its tree was."""
    return doc["context"].get("git_sha", "?") + ("-dirty" if doc["context"].get("git_dirty") else "")


def run_header(name, a, gate, sha):
    """The provenance every side-by-side record starts with: command, load, date, commit and host."""
    load, waited = gate
    return {"command": name, "load_avg_1m_at_start": load, "waited_for_quiet_s": waited, "forced": a.force,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "oomlab_git_sha": sha, "host": platform.node(), "cpu": cpu_name(), **cpu_identity(),
            "cores": os.cpu_count()}
