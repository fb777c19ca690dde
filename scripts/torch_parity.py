#!/usr/bin/env python3
"""torch_parity.py — one training step in oomlab and in PyTorch on the same weights and batch.

For each model and dtype: build the PyTorch twin (torchvision, Hugging Face, or
scripts/torch_models.py for resnet20 and the UNet), save its initial state_dict with
safetensors.torch.save_file and a random batch as .npy files (the layout `oomlab train
--dataset npy` reads), run `oomlab step` on them, run the same step in PyTorch
(zero_grad; loss = F.cross_entropy(model(x), y); loss.backward(); SGD(lr, no momentum,
no weight decay).step(); train mode, dropout 0), and compare: loss, logits, every
parameter gradient, every state_dict entry after the update (BN running statistics too).
NMSE = sum((oomlab - torch)^2) / sum(torch^2) (python/oomlab/parity.py) over all gradients of
the model together (`grad_nmse`) and per tensor (`grad_nmse_worst`, with its name). Bars (issue 18): grad NMSE
<= 1e-6 in float32 and <= 1e-10 in float64, for the whole model and for every tensor but
those whose gradient is analytically zero (RMS below 1e-6 of the model's: BERT's attention
key biases, to which softmax is blind), listed under `near_zero_grads` with both RMS values.

Runs where torch, torchvision, transformers, safetensors and numpy import; elsewhere it
prints `torch_parity: skipped: ...` and exits 0, so CI stays torch-free.
Usage: python3 scripts/torch_parity.py [--oomlab build/oomlab] [--models resnet18,...]
         [--dtypes float32,float64] [--threads 2] [--json reports/benchmarks/torch_parity_cpu.json]
Exit: 0 when every point meets its bar (or skipped), 1 when one does not, 2 on bad usage.
"""
import argparse
import platform
import subprocess
import sys
from pathlib import Path

from oomlab_report import parity_run
from oomlab_report.atomic import write_json_atomic

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))   # python/oomlab: the comparison, shared with oomlab.train_step
from oomlab.parity import BARS, grad_errors, nmse  # noqa: E402

# model -> (input: (C, H, W) or ("tokens", T), batch, classes, extra oomlab flags)
CASES = {
    "resnet18": ((3, 64, 64), 8, 10, []),
    "resnet20": ((1, 28, 28), 16, 10, []),
    "vgg11": ((3, 32, 32), 4, 10, ["--dropout", "0"]),
    "bert-mini": (("tokens", 32), 8, 2, ["--dropout", "0"]),
    "unet-small": ((3, 32, 32), 4, 3, []),
}
LR = 0.1


def make_batch(np, rng, model, spec, batch, classes, work):
    """Writes train_inputs/labels(/attention_mask).npy into `work`; returns the torch-side arrays."""
    if spec[0] == "tokens":
        t = spec[1]
        ids = rng.integers(1, 30522, size=(batch, t), dtype=np.int64)
        lengths = rng.integers(t // 2, t + 1, size=batch)
        mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int64)
        ids = ids * mask                                   # padding id 0 after each sample
        labels = rng.integers(0, classes, size=batch, dtype=np.int64)
        np.save(work / "train_attention_mask.npy", mask)
        arrays = {"input_ids": ids, "attention_mask": mask}
    else:
        x = rng.standard_normal(size=(batch,) + tuple(spec)).astype(np.float32)
        if model.startswith("unet"):
            labels = rng.integers(0, classes, size=(batch, spec[1], spec[2]), dtype=np.int64)
        else:
            labels = rng.integers(0, classes, size=batch, dtype=np.int64)
        ids = x
        arrays = {"x": x}
    np.save(work / "train_inputs.npy", ids)
    np.save(work / "train_labels.npy", labels)
    return arrays, labels


def torch_step(torch, model, arrays, labels, dtype):
    F = torch.nn.functional
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.0, weight_decay=0.0)
    opt.zero_grad(set_to_none=True)
    if "x" in arrays:
        logits = model(torch.from_numpy(arrays["x"]).to(dtype))
    else:
        logits = model(input_ids=torch.from_numpy(arrays["input_ids"]),
                       attention_mask=torch.from_numpy(arrays["attention_mask"])).logits
    loss = F.cross_entropy(logits, torch.from_numpy(labels))
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return loss.detach(), logits.detach(), grads, after


def run_case(mods, oomlab, model_name, dtype_name, seed, work):
    torch, np, st = mods["torch"], mods["numpy"], mods["safetensors.torch"]
    from torch_models import build
    spec, batch, classes, flags = CASES[model_name]
    dtype = torch.float64 if dtype_name == "float64" else torch.float32
    torch.manual_seed(seed)
    model = build(torch, model_name, classes,
                  input_chw=spec if spec[0] != "tokens" else (3, 224, 224),
                  seq_len=spec[1] if spec[0] == "tokens" else 128, dropout=0.0)
    if model_name.startswith("vgg"):
        for m in model.modules():          # torchvision's dropout=0.0, as oomlab's --dropout 0
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    model = model.to(dtype)
    weights = work / "init.safetensors"
    st.save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(weights))
    arrays, labels = make_batch(np, np.random.default_rng(seed), model_name, spec, batch, classes, work)
    out = work / "oomlab_step.safetensors"
    cmd = [oomlab, "step", "--model", model_name, "--data-dir", str(work), "--init", str(weights), "--out", str(out),
           "--dtype", dtype_name, "--lr", str(LR), "--classes", str(classes)] + flags
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    ours = st.load_file(str(out))
    loss, logits, grads, after = torch_step(torch, model, arrays, labels, dtype)

    errs = grad_errors(model_name, grads, lambda name: ours["grad/" + name])
    w_num = w_den = 0.0
    buf_max = 0.0
    for key, v in after.items():
        mine = ours["after/" + key]
        if v.dtype.is_floating_point:
            w_num += float(((mine.double() - v.double()) ** 2).sum())
            w_den += float((v.double() ** 2).sum())
            if "running" in key:
                buf_max = max(buf_max, float((mine.double() - v.double()).abs().max()))
        elif not torch.equal(mine, v):
            raise RuntimeError(f"{model_name}: after/{key} differs ({mine.tolist()} vs {v.tolist()})")
    point = {
        "model": model_name, "dtype": dtype_name, "batch": batch,
        "input": list(spec) if spec[0] != "tokens" else {"seq_len": spec[1]},
        "classes": classes, "parameters": sum(int(p.numel()) for p in model.parameters()),
        "loss_oomlab": float(ours["loss"].double()), "loss_torch": float(loss.double()),
        "loss_abs_diff": abs(float(ours["loss"].double()) - float(loss.double())),
        "logits_max_abs": float((ours["logits"].double() - logits.double()).abs().max()),
        "logits_nmse": nmse(ours["logits"], logits),
        **errs,
        "grad_max_abs": max(float((ours["grad/" + n].double() - g.double()).abs().max()) for n, g in grads.items()),
        "weights_after_nmse": w_num / w_den if w_den > 0 else 0.0,
        "running_stats_max_abs": buf_max,
        "bar_grad_nmse": BARS[dtype_name],
    }
    point["meets_bar"] = errs["grad_nmse"] <= BARS[dtype_name] and errs["grad_nmse_worst"] <= BARS[dtype_name]
    return point


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--oomlab", default=str(HERE.parent / "build" / "oomlab"))
    p.add_argument("--models", default=",".join(CASES))
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", help="write the points here (atomically)")
    a = p.parse_args(argv)
    matrix = parity_run.parse_matrix("torch_parity", a.models, a.dtypes, CASES, BARS)
    if matrix is None:
        return 2
    mods = parity_run.import_torch_stack("torch_parity", ": pip install them in a virtualenv")
    if mods is None:
        return 0
    if not parity_run.oomlab_is_executable("torch_parity", a.oomlab, " (build it, or pass --oomlab)"):
        return 2
    points = parity_run.run_matrix(run_case, mods, a, *matrix, "oomlab-parity-", 11)
    doc = parity_run.results_doc("torch_parity", mods, LR, points, HERE, {"python": platform.python_version()})
    if a.json:
        write_json_atomic(a.json, doc)
        print(f"wrote {a.json}")
    return 0 if all(pt["meets_bar"] for pt in points) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
