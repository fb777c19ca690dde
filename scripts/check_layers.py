#!/usr/bin/env python3
"""check_layers.py — fails when a lower layer of oomlab includes a higher one.

The layers (DESIGN.md section 2; one CMake library each, linked only downward):

    experiments/            the application: CLI commands, matrix runner, drivers, benchmarks
    models/                 the model zoo, built from engine/nn only
    kernels/cpu, kernels/cuda   backends: see only engine/core, engine/memory and the
                            kernel interface headers kernels/*.h (never each other);
                            kernels/cuda also sees engine/parallel, whose Communicator
                            interface its NCCL backend implements
    engine/                 the core engine; kernels/*.h (argument structs and tables) are
                            its interface to the backends and include only engine/core

Inside the engine, engine/train is above nn/optim/data/io/parallel, which are above
core/memory/autograd/ops. Also checked: only kernels/cuda includes CUDA headers or tests
a CUDA macro; and no code outside tests/ names KernelTableBypassForTest, the test-only
friend that can take a raw kernel from a table (kernels run only through launch()).
tests/ may include anything. Every offending line is printed as
FILE:LINE: message; the exit status is 1 if there is one, else 0.
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

ENGINE_LOW = ("engine/core", "engine/memory", "engine/autograd", "engine/ops")
ENGINE_MID = ("engine/nn", "engine/optim", "engine/data", "engine/io", "engine/parallel")


def area(path: str) -> str:
    """The layer area of a repository-relative path (file or include target)."""
    parts = path.split("/")
    if parts[0] == "engine" and len(parts) > 2:
        return "/".join(parts[:2])
    if parts[0] == "kernels":
        return "kernels/" + parts[1] if len(parts) > 2 else "kernels/api"
    return parts[0]


def allowed(src: str, dst: str) -> bool:
    """May a file in area `src` include a header in area `dst`?"""
    if src == dst or src in ("tests",):
        return True
    if src.startswith("experiments"):
        return dst.startswith(("engine/", "kernels/api", "models", "experiments"))
    if src == "models":
        return dst.startswith("engine/") and dst != "engine/train"
    if src == "kernels/cuda" and dst == "engine/parallel":
        return True   # the nccl communicator backend (kernels/cuda/nccl_comm.cpp)
    if src in ("kernels/cpu", "kernels/cuda"):
        return dst in ("engine/core", "engine/memory", "kernels/api")
    if src == "kernels/api":
        return dst == "engine/core"
    if src == "engine/train":
        return dst.startswith("engine/") or dst == "kernels/api"
    if src in ENGINE_MID:
        return dst in ENGINE_LOW or dst in ENGINE_MID or dst == "kernels/api"
    if src in ENGINE_LOW:
        return dst in ENGINE_LOW or dst == "kernels/api"
    return True   # scripts/, reports/ ... hold no C++


def check(root: Path) -> list:
    problems = []
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
                if not allowed(src, dst):
                    problems.append(f"{rel}:{lineno}: {src} must not include {m.group(1)} ({dst} is not below it)")
            if src == "kernels/cuda":
                continue
            m = SYSTEM_INCLUDE.match(line)
            if m and m.group(1).startswith(CUDA_HEADERS):
                problems.append(f"{rel}:{lineno}: only kernels/cuda may include CUDA headers (<{m.group(1)}>)")
            if CUDA_MACRO.match(line):
                problems.append(f"{rel}:{lineno}: only kernels/cuda may test a CUDA macro: {line.strip()}")
    return problems


def self_test() -> int:
    """Builds a tiny tree with one file per rule broken (and legal ones), checks the verdicts."""
    import tempfile
    files = {
        "engine/core/tensor.h": '#include "engine/memory/caching_allocator.h"\n#include "kernels/copy.h"\n',
        "engine/memory/caching_allocator.h": "",
        "engine/ops/conv.cpp": '#include "engine/nn/module.h"\n',                 # ops above nn: bad
        "engine/ops/conv.h": "",
        "engine/nn/module.h": '#include "engine/train/trainer.h"\n',              # nn above train: bad
        "engine/train/trainer.h": '#include "models/model_zoo.h"\n',              # engine above models: bad
        "kernels/copy.h": '#include "engine/core/tensor.h"\n',
        "kernels/conv.h": '#include "engine/ops/conv.h"\n',                       # interface above ops: bad
        "kernels/cpu/conv_cpu.cpp": '#include "kernels/conv.h"\n#include "kernels/cuda/conv.cu"\n',   # sibling: bad
        "kernels/cuda/conv.cu": "#include <cudnn.h>\n",
        "engine/core/dispatch.h": "struct KernelTableBypassForTest;\n",
        "engine/ops/linear.cpp": "auto f = KernelTableBypassForTest::raw(t, d, dt);\n",   # bypass: bad
        "models/model_zoo.h": '#include "experiments/cli/commands.h"\n',         # models above app: bad
        "experiments/cli/commands.h": "#include <cuda_runtime.h>\n#if OOMLAB_CUDA\n#endif\n",   # 2 bad
        "tests/test_x.cpp": '#include "kernels/cuda/conv.cu"\n#include "experiments/cli/commands.h"\n'
                            "struct KernelTableBypassForTest {};\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        found = sorted(p.split(":")[0] for p in check(Path(tmp)))
    want = sorted(["engine/ops/conv.cpp", "engine/nn/module.h", "engine/train/trainer.h", "kernels/conv.h",
                   "kernels/cpu/conv_cpu.cpp", "models/model_zoo.h", "experiments/cli/commands.h",
                   "experiments/cli/commands.h", "engine/ops/linear.cpp"])
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
