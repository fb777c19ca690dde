"""parity.py -- oomlab.train_step: one SGD step of a torch.nn.Module in oomlab and in PyTorch, on
the same weights and batch, compared (issue 55's quick parity check), and the comparison
itself, which scripts/torch_parity.py and scripts/graph_parity.py share.

The step is `oomlab step` (experiments/measure/parity_step.cpp) on the module's export, run
in-process by the C++ core: the whole batch, train mode, the classifier's cross entropy, SGD
with `lr`, no momentum; PyTorch runs `opt.zero_grad(); F.cross_entropy(model(x), y).backward();
opt.step()` on a copy of the module. Dropout is set to 0 on both sides (an export has none), so
the two steps are the same arithmetic. NMSE = sum((oomlab - torch)^2) / sum(torch^2), over all
gradients together and per tensor; the bar (issue 18's): <= 1e-6 in float32, <= 1e-10 in
float64, for the whole model and every tensor but those whose gradient is analytically zero
(RMS below 1e-6 of the model's: listed under near_zero_grads). Needs torch and numpy; the
weights travel as safetensors written and read here (no safetensors package needed).
"""
import copy
import json
import struct
import tempfile
from pathlib import Path

from oomlab.errors import InputError

BARS = {"float32": 1e-6, "float64": 1e-10}
_ST_TO_NUMPY = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32", "U8": "uint8",
                "BOOL": "bool"}


def nmse(a, b):
    den = float((b.double() ** 2).sum())
    num = float(((a.double() - b.double()) ** 2).sum())
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def grad_errors(model_name, grads, mine_of):
    """oomlab's gradients (mine_of(name)) against PyTorch's (grads): the whole model's NMSE,
    the worst tensor's, the model's gradient RMS, and the near-zero gradients listed apart.
    A gradient that is analytically zero (BERT's attention key bias: softmax ignores a shift
    shared by all keys) is rounding noise on both sides: its NMSE compares noise with noise,
    so it is listed apart (RMS below 1e-6 of the model's) instead of ranked."""
    num = den = 0.0
    for name, g in grads.items():
        mine = mine_of(name)
        if mine.shape != g.shape:
            raise RuntimeError(f"{model_name}: grad/{name} has shape {tuple(mine.shape)} in oomlab, {tuple(g.shape)} in torch")
        num += float(((mine.double() - g.double()) ** 2).sum())
        den += float((g.double() ** 2).sum())
    model_rms = (den / max(1, sum(g.numel() for g in grads.values()))) ** 0.5
    worst_name, worst, near_zero = "", 0.0, {}
    for name, g in grads.items():
        mine = mine_of(name)
        rms = float(g.double().pow(2).mean().sqrt())
        if rms < 1e-6 * model_rms:
            near_zero[name] = {"torch_rms": rms, "oomlab_rms": float(mine.double().pow(2).mean().sqrt())}
            continue
        e = nmse(mine, g)
        if e > worst or not worst_name:
            worst_name, worst = name, e
    return {"grad_nmse": num / den if den > 0 else 0.0, "grad_nmse_worst": worst, "grad_nmse_worst_tensor": worst_name,
            "grad_rms": model_rms, "near_zero_grads": near_zero}


def compare(name, dtype_name, batch, ours, loss, logits, grads, after, names, tied):
    """One point: loss, logits, gradients (under the graph's name of a tied weight: `tied`,
    the export's {other name: graph name}) and the weights after the update (the graph's
    `names`), against PyTorch's; meets_bar as the module docstring says."""
    errs = grad_errors(name, grads, lambda n: ours["grad/" + tied.get(n, n)])
    w_num = w_den = 0.0
    for key, v in after.items():
        if key not in names or not v.dtype.is_floating_point:
            continue
        mine = ours["after/" + key]
        w_num += float(((mine.double() - v.double()) ** 2).sum())
        w_den += float((v.double() ** 2).sum())
    point = {
        "model": name, "dtype": dtype_name, "batch": batch,
        "parameters": sum(int(g.numel()) for g in grads.values()),
        "loss_oomlab": float(ours["loss"].double()), "loss_torch": float(loss.double()),
        "loss_abs_diff": abs(float(ours["loss"].double()) - float(loss.double())),
        "logits_nmse": nmse(ours["logits"].reshape(logits.shape), logits),
        **errs, "tied": tied, "weights_after_nmse": w_num / w_den if w_den > 0 else 0.0,
        "bar_grad_nmse": BARS[dtype_name],
    }
    point["meets_bar"] = errs["grad_nmse"] <= BARS[dtype_name] and errs["grad_nmse_worst"] <= BARS[dtype_name]
    return point


def write_safetensors(path, arrays):
    """numpy arrays by name to a safetensors file (the format: an 8-byte little-endian header
    length, a JSON header of dtype/shape/data_offsets, the raw little-endian bytes)."""
    import numpy as np
    header, blobs, offset = {}, [], 0
    to_st = {v: k for k, v in _ST_TO_NUMPY.items()}
    for name, a in arrays.items():
        a = np.asarray(a, order="C").astype(a.dtype.newbyteorder("<"), copy=False)   # 0-d stays 0-d
        blob = a.tobytes()
        header[name] = {"dtype": to_st[a.dtype.name], "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """A safetensors file's tensors as numpy arrays by name."""
    import numpy as np
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, h in header.items():
        begin, end = h["data_offsets"]
        dtype = np.dtype(_ST_TO_NUMPY[h["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtype).reshape(h["shape"])
    return out


def _torch_step(torch, model, x, labels, lr):
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0, weight_decay=0.0)
    opt.zero_grad(set_to_none=True)
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    opt.step()
    return loss.detach(), logits.detach(), grads, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _without_dropout(torch, model):
    twin = copy.deepcopy(model).float()
    for m in twin.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
    return twin


def _labels_for(torch, model, x, targets, seed):
    """The targets as int64 class ids, checked against the module's [batch, classes] output."""
    with torch.no_grad():
        probe = copy.deepcopy(model).eval()(x)   # a copy: a train-mode forward would move BN's running stats
    if not isinstance(probe, torch.Tensor) or probe.dim() != 2:
        shape = tuple(probe.shape) if isinstance(probe, torch.Tensor) else type(probe).__name__
        raise InputError(f"train_step: the module must return [batch, classes] logits; it returns {shape}")
    batch, classes = probe.shape
    if targets is None:
        gen = torch.Generator().manual_seed(seed)
        return torch.randint(0, classes, (batch,), generator=gen, dtype=torch.int64), classes
    targets = torch.as_tensor(targets)
    if targets.dtype != torch.int64 or tuple(targets.shape) != (batch,) or not bool(
            ((targets >= 0) & (targets < classes)).all()):
        raise InputError(f"train_step: targets must be int64 class ids of shape ({batch},) in [0, {classes}), "
                         f"got {targets.dtype} {tuple(targets.shape)}")
    return targets, classes


def run_train_step(run_core, model, example_inputs, targets, lr, dtype, seed, export_args):
    """The body of oomlab.train_step (api.py), with run_core(command, flags) the core's runner."""
    try:
        import torch
    except ImportError:
        raise InputError("oomlab.train_step needs PyTorch (and numpy)") from None
    import numpy as np
    from oomlab.export import export_graph
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"train_step: expected a torch.nn.Module, got {type(model).__name__}")
    if dtype not in BARS:
        raise InputError(f"train_step: dtype must be float32 or float64, got {dtype!r}")
    x = example_inputs[0] if isinstance(example_inputs, (tuple, list)) else example_inputs
    if not isinstance(x, torch.Tensor):
        raise InputError("train_step needs example_inputs: a batch, e.g. torch.randn(4, 3, 32, 32)")
    twin = _without_dropout(torch, model)
    labels, _ = _labels_for(torch, twin, x, targets, seed)
    graph = export_graph(copy.deepcopy(twin), x, **(export_args or {}))
    names, tied = {p["name"] for p in graph["parameters"]}, graph["exporter"].get("tied", {})
    torch_dtype = torch.float64 if dtype == "float64" else torch.float32
    ref = twin.to(torch_dtype)
    with tempfile.TemporaryDirectory(prefix="oomlab_step_") as work:
        work = Path(work)
        (work / "graph.json").write_text(json.dumps(graph))
        write_safetensors(work / "init.safetensors", {k: v.detach().cpu().numpy() for k, v in ref.state_dict().items()
                                                      if k in names or k in tied})
        np.save(work / "train_inputs.npy", x.detach().cpu().numpy())
        np.save(work / "train_labels.npy", labels.numpy())
        run_core("step", {"model": "graph:" + str(work / "graph.json"), "data_dir": str(work),
                          "init": str(work / "init.safetensors"), "out": str(work / "out.safetensors"),
                          "dtype": dtype, "lr": repr(float(lr))})
        ours = {k: torch.from_numpy(v.copy()) for k, v in read_safetensors(work / "out.safetensors").items()}
    xt = x.to(torch_dtype) if x.is_floating_point() else x
    loss, logits, grads, after = _torch_step(torch, ref, xt, labels, lr)
    return compare(type(model).__name__, dtype, int(x.shape[0]), ours, loss, logits, grads, after, names, tied)

