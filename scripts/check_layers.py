#!/usr/bin/env python3
"""check_layers.py — fails when a lower layer of oomlab includes a higher one, or when two
folders include each other (a cycle), directly or through others.

The layers, lowest first (one CMake library per layer group):

    engine/core < kernels/*.h (the kernel interface: argument structs and tables)
      < engine/memory < engine/autograd < engine/ops < engine/io (safetensors, npy, atomic files)
      < engine/nn, engine/optim, engine/data (peers: none includes another) < engine/parallel
      < engine/train
    kernels/cpu, kernels/cuda   backends: see engine/core, engine/memory and kernels/*.h
                                (never each other); kernels/cuda also sees engine/parallel,
                                whose Communicator interface its NCCL backend implements
    models/                     the zoo: the engine but engine/train
    experiments/plan, experiments/launch (peers) < experiments/train, experiments/measure
      (peers) < experiments/cli
      < experiments/runner < experiments/NN_* (the drivers)
                                the application; experiments/main.cpp (the oomlab command),
                                experiments/benchmarks and experiments/python (the Python
                                package's module) see all of it

Also checked: only kernels/cuda includes CUDA headers or tests a CUDA macro; no code outside
tests/ names KernelTableBypassForTest, the test-only friend that can take a raw kernel from a
table (kernels run only through launch()). tests/ may include anything, but a test file outside
the gpu tier alone (its "// ctest tier:" line) may include only header-only kernels/cuda headers
(no .cpp / .cu of the same stem): CPU-only builds, which have no CUDA backend to link, build
every test file but those of the gpu tier alone (CMakeLists.txt).
Every offending line is printed as FILE:LINE: message, every folder cycle as "cycle: a -> b
-> a"; the exit status is 1 if there is one, else 0.
Usage: python3 scripts/check_layers.py [REPO_ROOT]
       python3 scripts/check_layers.py --self-test   (the checker on a small tree with known violations)
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SYSTEM_INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]+)>')
CUDA_HEADERS = ("cuda", "cublas", "cudnn", "nccl", "curand", "cusparse", "cufft", "nvrtc", "thrust/", "cub/")
BYPASS = re.compile(r'\bKernelTableBypassForTest\b')
CUDA_MACRO = re.compile(r'^\s*#\s*(if|ifdef|ifndef|elif)\b.*\b(OOMLAB_CUDA|OOMLAB_WITH_CUDA|__CUDACC__)\b')

# Rank of each engine area (and the kernel interface) in the order above: a file may include
# its own area and the areas of lower rank.
RANK = {"engine/core": 0, "kernels/api": 1, "engine/memory": 2, "engine/autograd": 3, "engine/ops": 4,
        "engine/io": 5, "engine/nn": 6, "engine/optim": 6, "engine/data": 6, "engine/parallel": 7,
        "engine/train": 8}
APP = {"experiments/plan": 0, "experiments/launch": 0, "experiments/train": 1, "experiments/measure": 1,
       "experiments/cli": 2,
       "experiments/runner": 3, "experiments/drivers": 4}


def area(path: str) -> str:
    """The layer area of a repository-relative path (file or include target)."""
    parts = path.split("/")
    if parts[0] == "engine" and len(parts) > 2:
        return "/".join(parts[:2])
    if parts[0] == "kernels":
        return "kernels/" + parts[1] if len(parts) > 2 else "kernels/api"
    if parts[0] == "experiments":
        if len(parts) == 2:
            return "experiments/app"
        if re.match(r"[0-9][0-9]_", parts[1]):
            return "experiments/drivers"
        return "experiments/" + parts[1]
    return parts[0]


def allowed(src: str, dst: str) -> bool:
    """May a file in area `src` include a header in area `dst`?"""
    if src == dst or src == "tests":
        return True
    if src in ("experiments/app", "experiments/benchmarks", "experiments/python"):
        return dst.startswith(("engine/", "kernels/api", "models", "experiments"))
    if src in APP:
        return dst.startswith(("engine/", "kernels/api", "models")) or APP.get(dst, 99) < APP[src]
    if src == "models":
        return dst.startswith("engine/") and dst != "engine/train" or dst == "kernels/api"
    if src == "kernels/cuda" and dst == "engine/parallel":
        return True   # the nccl communicator backend (kernels/cuda/nccl_comm.cpp)
    if src in ("kernels/cpu", "kernels/cuda"):
        return dst in ("engine/core", "engine/memory", "kernels/api")
    if src in RANK:
        return dst in RANK and RANK[dst] < RANK[src]
    return True   # scripts/, reports/ ... hold no C++


def cycles(edges: dict) -> list:
    """Every cycle of the folder graph (its strongly connected components of 2+ folders, or
    a folder that includes itself through others), each as a list a, b, ..., a."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp) + [sorted(comp)[0]])

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(root: Path) -> list:
    problems = []
    edges = {}
    sources = [p for d in ("engine", "kernels", "models", "experiments", "tests") for p in (root / d).rglob("*")
               if p.suffix in (".h", ".cpp", ".cu", ".cuh", ".hpp") and p.is_file()]
    for path in sorted(sources):
        rel = path.relative_to(root).as_posix()
        src = area(rel)
        for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if BYPASS.search(line) and src != "tests" and rel != "engine/core/dispatch.h":
                problems.append(f"{rel}:{lineno}: only tests may take a raw kernel (KernelTableBypassForTest)")
            m = INCLUDE.match(line)
            if m and "/" in m.group(1) and (root / m.group(1)).exists():
                dst = area(m.group(1))
                if dst != src and src != "tests":
                    edges.setdefault(src, set()).add(dst)
                if not allowed(src, dst):
                    problems.append(f"{rel}:{lineno}: {src} must not include {m.group(1)} ({dst} is not below it)")
            if src == "kernels/cuda":
                continue
            m = SYSTEM_INCLUDE.match(line)
            if m and m.group(1).startswith(CUDA_HEADERS):
                problems.append(f"{rel}:{lineno}: only kernels/cuda may include CUDA headers (<{m.group(1)}>)")
            if CUDA_MACRO.match(line):
                problems.append(f"{rel}:{lineno}: only kernels/cuda may test a CUDA macro: {line.strip()}")
    problems += cpu_only_test_links(root)
    for c in cycles(edges):
        problems.append("cycle: " + " -> ".join(c))
    return problems


TIER = re.compile(r'^// ctest tier: *(.*)$')


def cpu_only_test_links(root: Path) -> list:
    """Test files built without the CUDA backend (tier other than gpu alone) that include a
    kernels/cuda header with a source of the same stem: their link would fail there."""
    problems = []
    for path in sorted((root / "tests").glob("test_*.cpp")):
        text = path.read_text(errors="replace").splitlines()
        tiers = next((m.group(1).split() for m in map(TIER.match, text) if m), [])
        if tiers == ["gpu"]:
            continue
        for lineno, line in enumerate(text, 1):
            m = INCLUDE.match(line)
            if not (m and m.group(1).startswith("kernels/cuda/")):
                continue
            stem = (root / m.group(1)).with_suffix("")
            if any(stem.with_suffix(ext).exists() for ext in (".cpp", ".cu")):
                problems.append(f"tests/{path.name}:{lineno}: includes {m.group(1)}, whose definitions only the CUDA "
                                f"backend links, but its ctest tier is {' '.join(tiers) or 'missing'}, not gpu alone "
                                "(CPU-only builds would fail to link it)")
    return problems


def self_test() -> int:
    """Builds a tiny tree with one file per rule broken (and legal ones), checks the verdicts."""
    import tempfile
    files = {
        "engine/core/tensor.h": '#include "engine/core/dtype.h"\n',
        "engine/core/dtype.h": "",
        "engine/core/storage.cpp": '#include "engine/memory/caching_allocator.h"\n',   # core above memory: bad, a cycle
        "engine/memory/caching_allocator.h": '#include "engine/core/tensor.h"\n#include "kernels/copy.h"\n',
        "engine/ops/conv.cpp": '#include "engine/nn/module.h"\n',                 # ops above nn: bad
        "engine/ops/conv.h": "",
        "engine/nn/module.h": '#include "engine/train/trainer.h"\n',              # nn above train: bad
        "engine/nn/optim_user.cpp": '#include "engine/optim/sgd.h"\n',            # peers: bad
        "engine/optim/sgd.h": "",
        "engine/train/trainer.h": '#include "models/model_zoo.h"\n',              # engine above models: bad
        "kernels/copy.h": '#include "engine/core/tensor.h"\n',
        "kernels/conv.h": '#include "engine/ops/conv.h"\n',                       # interface above ops: bad
        "kernels/cpu/conv_cpu.cpp": '#include "kernels/conv.h"\n#include "kernels/cuda/conv.cu"\n',   # sibling: bad
        "kernels/cuda/conv.cu": "#include <cudnn.h>\n",
        "engine/core/dispatch.h": "struct KernelTableBypassForTest;\n",
        "engine/ops/linear.cpp": "auto f = KernelTableBypassForTest::raw(t, d, dt);\n",   # bypass: bad
        "models/model_zoo.h": '#include "experiments/cli/commands.h"\n',         # models above app: bad
        "experiments/cli/commands.h": "#include <cuda_runtime.h>\n#if OOMLAB_CUDA\n#endif\n",   # 2 bad
        "experiments/runner/matrix.h": '#include "experiments/cli/commands.h"\n',
        "experiments/cli/launcher.cpp": '#include "experiments/runner/matrix.h"\n',   # cli above runner: bad, a cycle
        "experiments/05_amp/driver.cpp": '#include "experiments/runner/matrix.h"\n',
        "experiments/main.cpp": '#include "experiments/runner/matrix.h"\n#include "experiments/cli/commands.h"\n',
        "tests/test_x.cpp": '// ctest tier: gpu\n#include "kernels/cuda/conv.cu"\n#include "experiments/cli/commands.h"\n'
                            "struct KernelTableBypassForTest {};\n",
        "kernels/cuda/rules.h": "",   # header-only: any test may include it
        "tests/test_y.cpp": '// ctest tier: unit\n#include "kernels/cuda/rules.h"\n#include "kernels/cuda/conv.h"\n',
        "kernels/cuda/conv.h": "",    # conv.cu defines it: test_y (unit) must not include it
        "tests/test_z.cpp": '// ctest tier: cli gpu\n#include "kernels/cuda/conv.h"\n',   # not gpu alone: bad
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        found = sorted(p.split(":")[0] for p in check(Path(tmp)))
    want = sorted(["engine/core/storage.cpp", "engine/ops/conv.cpp", "engine/nn/module.h", "engine/nn/optim_user.cpp",
                   "engine/train/trainer.h", "kernels/conv.h", "kernels/cpu/conv_cpu.cpp", "models/model_zoo.h",
                   "experiments/cli/commands.h", "experiments/cli/commands.h", "engine/ops/linear.cpp",
                   "experiments/cli/launcher.cpp", "cycle", "cycle", "tests/test_y.cpp", "tests/test_z.cpp"])
    if found != want:
        print(f"check_layers self-test FAILED: flagged {found}, expected {want}")
        return 1
    print(f"check_layers self-test: {len(want)} planted violations found, legal includes accepted")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    problems = check(root)
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
