#!/usr/bin/env python3
"""graph_parity.py — one training step of an imported graph model in oomlab and of the model
itself in PyTorch, on the same weights and batch (issue 32's faithfulness bar).

For each model: build it in PyTorch (torchvision or Hugging Face, dropout 0), export its graph
with scripts/export_model.py (the batch symbolic, so the step runs at another batch than the
export's), save its state_dict as safetensors and a random batch as .npy files, run
`oomlab step --model graph:FILE --init WEIGHTS` on them, run the same step in PyTorch (train
mode; zero_grad; loss; backward; SGD lr 0.1, no momentum) and compare as scripts/torch_parity.py
does: loss, logits, the NMSE of every parameter gradient (whole model and worst tensor, bar
1e-6 in float32 and 1e-10 in float64) and of the weights after the update. The loss is the
classifier's cross entropy, or for gpt2 the next-token cross entropy (labels = input ids
shifted left, the last position ignored: Hugging Face's labels=input_ids). A weight the model
ties (gpt2's lm_head.weight is transformer.wte.weight) is compared under the graph's name; a
gradient that is analytically zero (RMS below 1e-6 of the model's: BERT's attention key
biases) is listed under near_zero_grads instead of ranked, as torch_parity.py does.
A float32 point also measures both float32 runs against a float64 PyTorch step of the same
model (`oomlab_vs_float64_grad_nmse`, `torch_vs_float64_grad_nmse`): where float32 rounding
alone moves PyTorch's gradients by more than the bar (a deep random-init network), that
says whether oomlab's float32 is as close to the exact gradient as PyTorch's.

Runs where torch, torchvision, transformers, safetensors and numpy import; elsewhere it prints
`graph_parity: skipped: ...` and exits 0, so CI stays torch-free.
bert_padded is bert exported with --attention-mask, on a right-padded batch.
Usage: python3 scripts/graph_parity.py [--oomlab build/oomlab] [--models resnet50,bert,bert_padded,vit_b_16,gpt2]
         [--dtypes float32,float64] [--threads 2] [--json reports/benchmarks/graph_parity_cpu.json]
Exit: 0 when every point meets its bar (or skipped), 1 when one does not, 2 on bad usage.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

from oomlab_report import parity_run
from oomlab_report.atomic import write_json_atomic
from torch_parity import BARS, LR
from oomlab.parity import compare  # noqa: E402  (torch_parity puts python/ on the path)

HERE = Path(__file__).resolve().parent

# model -> (export spec, export example shape, step batch, input: (C, H, W) or ("tokens", T, vocab))
CASES = {
    "resnet50": ("torchvision:resnet50", "2,3,96,96", 8, (3, 96, 96)),
    "vit_b_16": ("torchvision:vit_b_16", "2,3,224,224", 3, (3, 224, 224)),
    "bert": ("hf:bert", "2,32", 4, ("tokens", 32, 30522)),
    # exported with --attention-mask; row i of the batch ends in 5 * i padding ids (id 0), which
    # PyTorch gets as attention_mask = ids != 0 and oomlab derives from the ids
    "bert_padded": ("hf:bert", "2,32", 4, ("tokens", 32, 30522)),
    "gpt2": ("hf:gpt2", "2,32", 3, ("tokens", 32, 50257)),
}


def build(mods, name):
    """The PyTorch model, dropout 0 (oomlab's import of an eval export has none)."""
    torch, tv, tf = mods["torch"], mods["torchvision"], mods["transformers"]
    if name in ("bert", "bert_padded"):
        return tf.BertForSequenceClassification(tf.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                                               attn_implementation="sdpa"))
    if name == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                                attn_implementation="sdpa"))
    model = getattr(tv.models, name)(weights=None)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    with torch.no_grad():   # torchvision zero-initialises ViT's head and class token: no gradient would flow
        for n, p in model.named_parameters():
            if p.dim() >= 1 and not n.endswith("bias") and not bool(p.any()):
                p.normal_(0.0, 0.02)
    return model


def export(spec, shape, tokens, out, mask=False):
    cmd = [sys.executable, str(HERE / "export_model.py"), spec, "--input-shape", shape, "--out", str(out)]
    if tokens:
        cmd += ["--input-dtype", "int64"]
    if mask:
        cmd += ["--attention-mask"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(HERE)))
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")


def torch_step(torch, model, name, x, labels):
    F = torch.nn.functional
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.0, weight_decay=0.0)
    opt.zero_grad(set_to_none=True)
    if name == "gpt2":
        logits = model(input_ids=x).logits
        target = torch.cat([x[:, 1:], torch.full((x.shape[0], 1), -100, dtype=torch.int64)], 1)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
    elif name in ("bert", "bert_padded"):
        mask = (x != 0).long() if name == "bert_padded" else None
        logits = model(input_ids=x, attention_mask=mask).logits
        loss = F.cross_entropy(logits, labels)
    else:
        logits = model(x)
        loss = F.cross_entropy(logits, labels)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    after = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return loss.detach(), logits.detach(), grads, after


def graph_names(graph_file):
    return {p["name"] for p in json.loads(Path(graph_file).read_text())["parameters"]}


def run_case(mods, oomlab, name, dtype_name, seed, work):
    torch, np, st = mods["torch"], mods["numpy"], mods["safetensors.torch"]
    spec, shape, batch, inp = CASES[name]
    dtype = torch.float64 if dtype_name == "float64" else torch.float32
    torch.manual_seed(seed)
    model = build(mods, name)
    graph = work / "graph.json"
    export(spec, shape, inp[0] == "tokens", graph, mask=name == "bert_padded")
    model = model.to(dtype)
    names = graph_names(graph)
    tied = json.loads(graph.read_text())["exporter"].get("tied", {})
    # the state_dict as PyTorch has it (a tied weight under both names: oomlab reads it once)
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if k in names or k in tied}
    weights = work / "init.safetensors"
    st.save_file(state, str(weights))
    rng = np.random.default_rng(seed)
    classes = 1000 if inp[0] != "tokens" else 2
    labels = rng.integers(0, classes, size=batch, dtype=np.int64)
    if inp[0] == "tokens":
        arr = rng.integers(1, inp[2], size=(batch, inp[1]), dtype=np.int64)
        if name == "bert_padded":
            for i in range(batch):
                arr[i, inp[1] - 5 * i:] = 0
        x = torch.from_numpy(arr)
    else:
        arr = rng.standard_normal(size=(batch,) + tuple(inp)).astype(np.float32)
        x = torch.from_numpy(arr).to(dtype)
    np.save(work / "train_inputs.npy", arr)
    np.save(work / "train_labels.npy", labels)
    out = work / "oomlab_step.safetensors"
    cmd = [oomlab, "step", "--model", f"graph:{graph}", "--data-dir", str(work), "--init", str(weights),
           "--out", str(out), "--dtype", dtype_name, "--lr", str(LR)]   # the classes are the graph's own
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    ours = st.load_file(str(out))
    exact = None
    if dtype == torch.float32:   # float64 PyTorch as the reference both float32 runs are measured against
        twin = copy.deepcopy(model).double()
        exact = torch_step(torch, twin, name, x if inp[0] == "tokens" else x.double(), torch.from_numpy(labels))[2]
    loss, logits, grads, after = torch_step(torch, model, name, x, torch.from_numpy(labels))
    point = compare(name, dtype_name, batch, ours, loss, logits, grads, after, names, tied)
    if exact is not None:
        point["torch_vs_float64_grad_nmse"] = model_nmse(exact, lambda n: grads[n])
        point["oomlab_vs_float64_grad_nmse"] = model_nmse(exact, lambda n: ours["grad/" + tied.get(n, n)])
    return point


def model_nmse(exact, grad_of):
    """NMSE over the whole model of grad_of(name) against the float64 reference gradients."""
    num = den = 0.0
    for n, ref in exact.items():
        num += float(((grad_of(n).double() - ref) ** 2).sum())
        den += float((ref ** 2).sum())
    return num / den if den > 0 else 0.0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--oomlab", default=str(HERE.parent / "build" / "oomlab"))
    p.add_argument("--models", default=",".join(CASES))
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    matrix = parity_run.parse_matrix("graph_parity", a.models, a.dtypes, CASES, BARS)
    if matrix is None:
        return 2
    mods = parity_run.import_torch_stack("graph_parity")
    if mods is None:
        return 0
    if not parity_run.oomlab_is_executable("graph_parity", a.oomlab):
        return 2

    def against_float64(pt):
        if "oomlab_vs_float64_grad_nmse" in pt:
            print(f"{'':9s}   against float64 PyTorch: oomlab float32 {pt['oomlab_vs_float64_grad_nmse']:.2e}, "
                  f"PyTorch float32 {pt['torch_vs_float64_grad_nmse']:.2e}", flush=True)
    points = parity_run.run_matrix(run_case, mods, a, *matrix, "oomlab-graph-parity-", 9, against_float64)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=HERE).stdout.strip() != ""
    doc = parity_run.results_doc("graph_parity", mods, LR, points, HERE, {"git_dirty": dirty})
    if a.json:
        write_json_atomic(a.json, doc)
        print(f"wrote {a.json}")
    return 0 if all(pt["meets_bar"] for pt in points) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
