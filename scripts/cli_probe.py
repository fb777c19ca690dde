#!/usr/bin/env python3
"""cli_probe.py -- runs oomlab's commands for real with random flag combinations at edge values
and fails on any exit that the README's exit-code table does not allow.

The fuzz targets (tests/fuzz/) check what parsing accepts; this probe checks what a run does
with what parsing accepted: a size list left empty, a count that wraps, a table sized by a flag.
Each run is a small base command (meta device, a few steps) plus 2-4 flags drawn from that
command's `--help` (new flags join by themselves), each flag's value drawn from its choices or,
by its metavar, from edge values (0, 1, 7, 2^63 - 1, tiny sizes, 17EiB ...).

Contract: a run that exits 0, 2, 3, 4 or 5 is fine; any other exit (70 internal error, a
signal, an abort) is a finding, printed with its command line, and so is a summary, estimate,
plan or trick past --timeout (a train or allreduce-bench run past it is listed as slow: its
time grows with what was asked).
Exit status: 1 when any run was a finding, else 0. Same --seed, same runs.
Flags that name files or hosts (--json, --save, --data-dir, --master-addr ...) are left out:
their hostile values have their own tests and fuzz targets.

  python3 scripts/cli_probe.py --oomlab build/oomlab --runs 300 --seed 1
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1 \
    python3 scripts/cli_probe.py --oomlab build-asan/oomlab --memory-gib 0   # under the sanitizers
"""
import argparse
import random
import re
import resource
import subprocess
import sys

BASES = {   # {dataset}: the model's own (a drawn --dataset replaces it, as any drawn flag replaces the base's)
    "train": "train --model {model} --dataset {dataset} --synthetic-size 64 --batch 8 --steps 2 --device meta --quiet "
             "--eval-batches 1",
    "estimate": "estimate --model {model} --batch 2",
    "summary": "summary --model {model}",
    "plan": "plan --model {model} --gpu t4 --global-batch 64",
    "trick": "trick --name inplace-relu --batch 2",
    "allreduce-bench": "allreduce-bench --max-bytes 256 --iters 1 --warmup 0",
}
MODELS = {"mlp": "synthetic", "resnet20": "synthetic", "bert-tiny": "synthetic-seq", "unet-small": "synthetic-seg",
          "tiny-ff": "synthetic", "vgg11_bn": "synthetic", "resnet18": "synthetic"}
# files, folders, hosts and devices whose probing needs other machinery; --model is the base's
LEFT_OUT = {"json", "memory-snapshot", "chrome-trace", "save", "resume", "init", "data-dir", "verify", "model",
            "quiet", "master-addr", "master-port", "rank", "world-size", "device", "backend"}
# half the draws are values a user would give, half are edges
PLAIN = {"int": ["1", "2", "3", "4", "8"], "number": ["0.1", "0.5", "0.9", "2"], "size": ["8", "1K", "64K", "3MiB"],
         "shape": ["1,28,28", "3,32,32"]}
INTEGERS = ["0", "1", "2", "3", "5", "7", "8", "16", "64", "1000", "65536", "-1", "2147483648",
            "9223372036854775807", "9223372036854775808"]
NUMBERS = ["0", "1", "0.5", "1e-9", "-1", "1e308", "1e400", "nan", "inf"]
SIZES = ["0", "1", "8", "12", "1K", "3MiB", "4GiB", "17EiB", "-1"]
SHAPES = ["1,1,1", "3,1,1", "1,28,28", "3,32,32", "0,1,1", "3,4611686018427387904,2"]
ALLOWED = {0, 2, 3, 4, 5}
# commands whose time grows with what was asked (--iters 2^63, --max-bytes 4GiB on 3 ranks): a
# run past --timeout is listed, not a finding; the others (meta steps, a search) must finish
WORK_COMMANDS = {"train", "allreduce-bench"}


def domain(metavar):
    """The values a flag of this metavar is probed with: (plain, edge) lists (None: a switch)."""
    if not metavar:
        return None
    if "|" in metavar and not metavar.isupper():
        return metavar.split("|"), metavar.split("|")
    if metavar == "SIZE":
        return PLAIN["size"], SIZES
    if metavar == "C,H,W":
        return PLAIN["shape"], SHAPES
    if metavar in ("X", "P", "F", "DECAY", "SECONDS"):
        return PLAIN["number"], NUMBERS
    return PLAIN["int"], INTEGERS


def flags_of(oomlab, command):
    """{flag: values} from `oomlab COMMAND --help` (one line per flag: '  --name METAVAR  help')."""
    text = subprocess.run([oomlab, command, "--help"], capture_output=True, text=True, check=True).stdout
    flags = {}
    for line in text.splitlines():
        m = re.match(r"\s+--([a-z0-9-]+)(?: (\S+))?\s", line)
        if m and m.group(1) not in LEFT_OUT:
            flags[m.group(1)] = domain(m.group(2) or "")
    return flags


def limit_memory(gib):
    """preexec_fn: the run's address space capped, so a huge request is its out-of-memory path
    (exit 3), never this machine's."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))
    return limit


def one_run(rng, table):
    """One command line: the base's flags, 2-4 drawn flags replacing or joining them."""
    command = rng.choice(sorted(BASES))
    model = rng.choice(sorted(MODELS))
    words = BASES[command].format(model=model, dataset=MODELS[model]).split()
    flags = {}   # --name -> value ("" for a switch), in order
    for i, w in enumerate(words[1:], 1):
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            flags[w] = "" if nxt.startswith("--") or not nxt else nxt
    names = sorted(table[command])
    for name in rng.sample(names, k=min(len(names), rng.randint(2, 4))):
        values = table[command][name]
        flags["--" + name] = "" if values is None else rng.choice(values[rng.random() < 0.5])
    args = [command]
    for name, value in flags.items():
        args += [name] + ([value] if value else [])
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oomlab", default="build/oomlab")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60, help="seconds a run may take (default 60)")
    ap.add_argument("--memory-gib", type=int, default=6,
                    help="each run's address space (default 6 GiB; 0: no cap, for a sanitizer build's shadow memory)")
    o = ap.parse_args()
    rng = random.Random(o.seed)
    table = {c: flags_of(o.oomlab, c) for c in BASES}
    findings = 0
    exits = {}
    for _ in range(o.runs):
        args = one_run(rng, table)
        try:
            r = subprocess.run([o.oomlab] + args, capture_output=True, text=True, timeout=o.timeout,
                               preexec_fn=limit_memory(o.memory_gib) if o.memory_gib else None)
            code, tail = r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:]
        except subprocess.TimeoutExpired:
            code, tail = f"timeout ({o.timeout:g} s)", []
            if args[0] in WORK_COMMANDS:
                code = "slow"
                print(f"cli_probe: slow (the work asked, not a finding): oomlab {' '.join(args)}", flush=True)
        exits[code] = exits.get(code, 0) + 1
        if code not in ALLOWED and code != "slow":
            findings += 1
            print(f"cli_probe: FINDING exit {code}: oomlab {' '.join(args)}", *tail, sep="\n  ", flush=True)
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(exits.items(), key=lambda kv: str(kv[0])))
    print(f"cli_probe: {o.runs} runs (seed {o.seed}), {findings} finding(s); exits {counts}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
