"""api.py -- oomlab.estimate / summary / plan: the CLI's commands (`oomlab estimate|summary|plan`)
run in-process by the C++ core (experiments/python/core_module.cpp), so the package's answers,
checks and error messages are the CLI's, byte for byte.

oomlab.train_step (oomlab.parity) checks one training step of an nn.Module against PyTorch's.
A model is a zoo name ("resnet50", "bert-base"), a graph file ("models/graphs/resnet50.json",
or "graph:FILE"), or a torch.nn.Module with an example input, exported with oomlab.export (its
batch dim symbolic) to a temporary graph file first. Keyword arguments are the CLI's flags
with underscores (seq_len=128 is --seq-len 128, channels_last=True is --channels-last, a
value of None or False leaves the flag out); an unknown one is the CLI's error. Errors raise
oomlab.errors' exceptions: InputError, UnsupportedOpsError, OutOfMemoryError, InternalError.
Nothing is printed.
"""
import json
import os
import tempfile
from pathlib import Path

from oomlab.errors import KINDS, InputError
from oomlab.results import Estimate, Plan, Summary, TrainStepCheck

_PACKAGE_DIR = Path(__file__).resolve().parent
_core = None


def _core_module():
    global _core
    if _core is None:
        from oomlab import _core as core   # the C++ module; built by `pip install .`
        calibration = _PACKAGE_DIR / "plan_calibration.json"   # the wheel's copy of reports/'s
        if calibration.exists():
            core.set_time_model_path(str(calibration))
        _core = core
    return _core


def _flag_args(flags):
    args = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        args.append("--" + name.replace("_", "-"))
        if value is not True:
            args.append(str(value))
    return args


def _run(command, flags):
    kind, message, results = _core_module().run(command, _flag_args(flags))
    if kind:
        raise KINDS.get(kind, InputError)(message)
    return json.loads(results) if results else None


def _is_torch_module(model):
    try:
        import torch
    except ImportError:
        return False
    return isinstance(model, torch.nn.Module)


class _ModelArg:
    """The --model value for `model` (and the batch an example input gives), with the temporary
    graph file of an exported nn.Module removed afterwards."""

    def __init__(self, model, example_inputs, export_args):
        self.tmp, self.batch = None, None
        if _is_torch_module(model):
            from oomlab.export import export_graph
            example = example_inputs[0] if isinstance(example_inputs, (tuple, list)) else example_inputs
            if example is None:
                raise InputError("a torch.nn.Module needs example_inputs (e.g. torch.randn(2, 3, 224, 224))")
            graph = export_graph(model, example, **export_args)
            fd, self.tmp = tempfile.mkstemp(prefix="oomlab_graph_", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(graph, f)
            self.value, self.batch = "graph:" + self.tmp, int(example.shape[0])
        elif isinstance(model, (str, os.PathLike)):
            text = os.fspath(model)
            is_file = text.endswith(".json") or os.path.sep in text
            self.value = "graph:" + os.path.abspath(text) if is_file and not text.startswith("graph:") else text
        else:
            raise InputError(f"model: expected a zoo name, a graph file or a torch.nn.Module, got {type(model).__name__}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.tmp:
            os.unlink(self.tmp)


def _model_flags(m, batch, flags):
    out = {"model": m.value, "batch": batch if batch is not None else m.batch}
    out.update(flags)
    return out


def estimate(model, example_inputs=None, *, batch=None, optimizer=None, amp=None, checkpoint=None, attention=None,
             device_memory=None, by_module=True, export_args=None, **flags):
    """The exact memory of one training step on the meta device, as `oomlab estimate`: peak
    allocated and reserved bytes, by component and (by_module, `--by-module`) by module path at
    the peak; with device_memory (bytes or "24GiB") also the largest batch that fits. batch
    defaults to the example input's."""
    with _ModelArg(model, example_inputs, export_args or {}) as m:
        fl = _model_flags(m, batch, dict(optimizer=optimizer, amp=amp, checkpoint=checkpoint, attention=attention,
                                         device_memory=device_memory, by_module=by_module, **flags))
        return Estimate.from_results(_run("estimate", fl))


def summary(model, example_inputs=None, *, batch=None, export_args=None, **flags):
    """The per-layer table of `oomlab summary` (each module's output and saved-for-backward bytes)."""
    with _ModelArg(model, example_inputs, export_args or {}) as m:
        return Summary.from_results(_run("summary", _model_flags(m, batch, flags)))


def plan(model, example_inputs=None, *, gpu=None, device_memory=None, gpus=None, global_batch=None, batch=None,
         export_args=None, **flags):
    """`oomlab plan`: what to turn on, at what micro-batch, to train `model` fastest on the given card(s)
    (gpu="a100-80gb", or device_memory); the frontier, the recommendation and why the rest lost."""
    with _ModelArg(model, example_inputs, export_args or {}) as m:
        fl = {"model": m.value, "gpu": gpu, "device_memory": device_memory, "gpus": gpus,
              "global_batch": global_batch, "batch": batch}
        if global_batch is None and batch is None:
            fl["global_batch"] = m.batch
        fl.update(flags)
        return Plan.from_results(_run("plan", fl))


def train_step(model, example_inputs, targets=None, *, lr=0.1, dtype="float32", seed=0, export_args=None):
    """A quick parity check: one SGD step (lr, no momentum, train mode, dropout 0) of the
    torch.nn.Module `model` on the batch `example_inputs` with class-id `targets` (default:
    random ones, seeded), in oomlab (`oomlab step` on its export) and in PyTorch on a copy,
    compared: loss, logits, every gradient and the weights after the update (oomlab.parity).
    `dtype` is float32 or float64; the model itself is left untouched."""
    from oomlab.parity import run_train_step
    return TrainStepCheck.from_point(run_train_step(_run, model, example_inputs, targets, lr, dtype, seed,
                                                    export_args))
