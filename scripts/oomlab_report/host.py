"""host.py — what the benchmark scripts record about the machine, and their quiet-machine gate.

cpu_name() and cpu_identity() name the CPU (the VMs these runs land on differ between sessions);
wait_for_quiet() waits for the 1-minute load average to fall to a bound and says whether it did.
"""
import os
import platform
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
