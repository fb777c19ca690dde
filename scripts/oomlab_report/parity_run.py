"""parity_run.py — what scripts/torch_parity.py and scripts/graph_parity.py share: the
model x dtype matrix (names checked, PyTorch's stack imported or a clean skip, each case run
in a folder of its own), the one-line summary of a point, and the results document.

A tool passes its own case runner, run_case(mods, oomlab, model, dtype, seed, work) -> point;
a point holds loss_oomlab, loss_torch, loss_abs_diff, grad_nmse, grad_nmse_worst(_tensor),
near_zero_grads, weights_after_nmse, meets_bar and bar_grad_nmse.
"""
import datetime
import importlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

TORCH_STACK = ("torch", "torchvision", "transformers", "safetensors.torch", "numpy")
VERSIONED = ("torch", "torchvision", "transformers", "numpy")


def parse_matrix(tool, models_arg, dtypes_arg, cases, bars):
    """The comma lists of --models and --dtypes; None (after an error line) when one is unknown."""
    models = [m for m in models_arg.split(",") if m]
    dtypes = [d for d in dtypes_arg.split(",") if d]
    bad = [m for m in models if m not in cases] + [d for d in dtypes if d not in bars]
    if bad:
        print(f"{tool}: error: unknown model/dtype {bad}; models {list(cases)}, dtypes {list(bars)}", file=sys.stderr)
        return None
    return models, dtypes


def import_torch_stack(tool, hint=""):
    """The modules of TORCH_STACK by name, or None after `<tool>: skipped: ...` when one is missing."""
    try:
        return {name: importlib.import_module(name) for name in TORCH_STACK}
    except ImportError as exc:
        print(f"{tool}: skipped: {exc} (needs torch, torchvision, transformers, safetensors, numpy{hint})")
        return None


def oomlab_is_executable(tool, oomlab, hint=""):
    if os.access(oomlab, os.X_OK):
        return True
    print(f"{tool}: error: {oomlab} is not an executable oomlab{hint}", file=sys.stderr)
    return False


def describe(pt, label):
    return (f"{label}: loss {pt['loss_oomlab']:.8g} vs {pt['loss_torch']:.8g} "
            f"(|diff| {pt['loss_abs_diff']:.2e}); grad NMSE {pt['grad_nmse']:.2e} "
            f"(worst {pt['grad_nmse_worst']:.2e} {pt['grad_nmse_worst_tensor']}; {len(pt['near_zero_grads'])} ~0); "
            f"weights after NMSE {pt['weights_after_nmse']:.2e}; "
            f"{'ok' if pt['meets_bar'] else 'ABOVE BAR'} (<= {pt['bar_grad_nmse']:g})")


def run_matrix(run_case, mods, a, models, dtypes, prefix, width, after=None):
    """Every model x dtype through run_case (a: the tool's arguments, with oomlab, seed and
    threads), each printed as it ends (then after(pt), if given, prints more); the points."""
    if a.threads > 0:
        mods["torch"].set_num_threads(a.threads)
    points = []
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for m in models:
            for d in dtypes:
                work = Path(tmp) / f"{m}-{d}"
                work.mkdir()
                pt = run_case(mods, a.oomlab, m, d, a.seed, work)
                points.append(pt)
                print(describe(pt, f"{m:{width}s} {d}"), flush=True)
                if after:
                    after(pt)
    return points


def results_doc(tool, mods, lr, points, here, extra):
    """The document a tool writes with --json; `extra` (e.g. python, git_dirty) after cpu."""
    git = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=here).stdout.strip()
    doc = {"command": tool, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "git_sha": git, "host": platform.node(), "cpu": platform.processor() or platform.machine()}
    doc.update(extra)
    doc.update({"versions": {n: getattr(mods[n], "__version__", "?") for n in VERSIONED},
                "torch_threads": mods["torch"].get_num_threads(), "lr": lr, "points": points})
    return doc
