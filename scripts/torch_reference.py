#!/usr/bin/env python3
"""Run oomlab's training step in PyTorch and write the same results JSON as `oomlab train`.

The side-by-side of reports/results: the same model (torchvision's VGG/ResNet, Hugging
Face's BertForSequenceClassification, both with the architectures oomlab's zoo copies),
the same batch, optimizer, dtype policy and step as `oomlab train --dataset synthetic*`:
host batch -> device copy, forward, cross-entropy, backward, optimizer step, loss.item().
Timing: per step, host clock after torch.cuda.synchronize() (as oomlab's trainer), after
`--warmup` untimed steps. Memory: torch.cuda.max_memory_allocated / _reserved under
PyTorch's stat names (allocated_bytes.all.peak, reserved_bytes.all.peak) plus the whole
torch.cuda.memory_stats() dict, so oomlab's and PyTorch's figures compare key by key.

Usage (on a GPU machine with torch, torchvision and, for bert-*, transformers):
  python3 scripts/torch_reference.py --model resnet50 --batch 128 --steps 30 \
      --allow-tf32 none --mode eager --json out/torch_resnet50_fp32.json
  --mode compile wraps the model in torch.compile (recorded; falls back to an error entry
  in the JSON, not a crash, when compilation fails).  --device cpu works for checking the
  script on a machine without a GPU (memory figures are then absent).
Exit status 2 with one line `torch_reference: error: ...` on bad input; the JSON is
written atomically (temp file + rename) and only on success.
"""
import argparse
import datetime
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from oomlab_report.atomic import write_json_atomic

SCHEMA_VERSION = 2
IMAGE_MODELS = {  # name -> (torchvision constructor, default input C,H,W)
    "vgg11": ("vgg11", (3, 224, 224)), "vgg11_bn": ("vgg11_bn", (3, 224, 224)),
    "vgg16": ("vgg16", (3, 224, 224)), "vgg16_bn": ("vgg16_bn", (3, 224, 224)),
    "resnet18": ("resnet18", (3, 224, 224)), "resnet34": ("resnet34", (3, 224, 224)),
    "resnet50": ("resnet50", (3, 224, 224)),
}
BERT_MODELS = {  # name -> (layers, hidden, heads), as models/bert.cpp
    "bert-tiny": (2, 128, 2), "bert-mini": (4, 256, 4),
    "bert-small": (4, 512, 8), "bert-base": (12, 768, 12),
}


class UsageError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--input", default="", help="C,H,W for image models (default: the model's)")
    p.add_argument("--classes", type=int, default=None,
                   help="default: 10 for image models, 2 for bert-* (as oomlab's synthetic and synthetic-seq)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="sgd")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--allow-tf32", choices=("none", "cudnn", "all"), default="cudnn",
                   help="none: strict fp32; cudnn: PyTorch's default (convs may use TF32); all: matmul too")
    p.add_argument("--cudnn-benchmark", choices=("on", "off"), default="off")
    p.add_argument("--mode", choices=("eager", "compile"), default="eager")
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", required=True, help="output file (written atomically)")

    try:
        a = p.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the reason
        raise UsageError("bad command line (see above)") from exc
    if a.model not in IMAGE_MODELS and a.model not in BERT_MODELS:
        raise UsageError(f"--model {a.model!r} has no PyTorch twin here; one of "
                         + ", ".join(sorted(IMAGE_MODELS) + sorted(BERT_MODELS)))
    if a.classes is None:
        a.classes = 2 if a.model in BERT_MODELS else 10
    for name in ("batch", "steps", "classes", "seq_len"):
        if getattr(a, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(a, name)})")
    if a.warmup < 0:
        raise UsageError(f"--warmup must be >= 0 (got {a.warmup})")
    if a.input:
        try:
            a.input = tuple(int(x) for x in a.input.split(","))
        except ValueError:
            a.input = ()
        if len(a.input) != 3 or min(a.input) < 1:
            raise UsageError("--input expects C,H,W with positive integers, e.g. 3,224,224")
    out_dir = Path(a.json).resolve().parent
    if not out_dir.is_dir() or not os.access(out_dir, os.W_OK):
        raise UsageError(f"cannot write {a.json}: directory {out_dir} does not exist or is not writable")
    if a.lr is None:
        a.lr = 0.1 if a.optimizer == "sgd" else 1e-3
    return a


def build(a, torch):
    """(model, make_batch(step) -> (host input, host target), samples->tokens factor)."""
    g = torch.Generator().manual_seed(a.seed)
    if a.model in IMAGE_MODELS:
        import torchvision
        ctor, default_in = IMAGE_MODELS[a.model]
        shape = a.input or default_in
        model = getattr(torchvision.models, ctor)(weights=None, num_classes=a.classes)
        pool = [(torch.randn((a.batch,) + tuple(shape), generator=g),
                 torch.randint(0, a.classes, (a.batch,), generator=g)) for _ in range(4)]
        return model, (lambda i: pool[i % len(pool)]), 1, {"input": list(shape)}
    from transformers import BertConfig, BertForSequenceClassification
    layers, hidden, heads = BERT_MODELS[a.model]
    if a.seq_len > 512:
        raise UsageError(f"--seq-len {a.seq_len} exceeds max_positions 512")
    cfg = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=4 * hidden, max_position_embeddings=512, type_vocab_size=2,
                     hidden_act="gelu", layer_norm_eps=1e-12, num_labels=a.classes,
                     attn_implementation="eager")  # matmul + softmax, as oomlab's attention
    model = BertForSequenceClassification(cfg)
    pool = []
    for _ in range(4):
        ids = torch.randint(1, 30522, (a.batch, a.seq_len), generator=g)
        lengths = torch.randint(a.seq_len // 2, a.seq_len + 1, (a.batch,), generator=g)
        ids[torch.arange(a.seq_len)[None, :] >= lengths[:, None]] = 0  # padding id 0, masked
        pool.append((ids, torch.randint(0, a.classes, (a.batch,), generator=g)))
    return model, (lambda i: pool[i % len(pool)]), a.seq_len, {"seq_len": a.seq_len}


def make_optimizer(a, torch, params):
    if a.optimizer == "sgd":
        return torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    cls = torch.optim.Adam if a.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=a.lr, weight_decay=a.weight_decay)


def pct(sorted_vals, q):
    i = min(len(sorted_vals) - 1, int(q * (len(sorted_vals) - 1) + 0.5))
    return sorted_vals[i]


def git_sha():
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(a):
    import torch
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda: no usable CUDA device; use --device cpu")
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = a.allow_tf32 == "all"
    torch.backends.cudnn.allow_tf32 = a.allow_tf32 != "none"
    torch.backends.cudnn.benchmark = a.cudnn_benchmark == "on"
    model, batch_of, tokens_per_sample, shape_cfg = build(a, torch)
    model.to(dev).train()
    opt = make_optimizer(a, torch, model.parameters())
    step_model = model
    compile_error = None
    if a.mode == "compile":
        step_model = torch.compile(model)
    loss_fn = torch.nn.CrossEntropyLoss()
    is_bert = a.model in BERT_MODELS

    def step(i):
        x, y = batch_of(i)
        x, y = x.to(dev, non_blocking=False), y.to(dev, non_blocking=False)
        if is_bert:
            logits = step_model(input_ids=x, attention_mask=(x != 0).long()).logits
        else:
            logits = step_model(x)
        loss = loss_fn(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    try:
        for i in range(a.warmup):
            step(i)
    except Exception as exc:  # torch.compile failures surface at the first call
        if a.mode != "compile":
            raise
        compile_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    times, losses = [], []
    if compile_error is None:
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        for i in range(a.steps):
            t0 = time.perf_counter()
            losses.append(step(a.warmup + i))
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    s = sorted(times)
    step_time = ({"median": pct(s, 0.5), "p10": pct(s, 0.1), "p90": pct(s, 0.9),
                  "mean": statistics.fmean(s), "count": len(s)} if s else
                 {"median": 0.0, "p10": 0.0, "p90": 0.0, "mean": 0.0, "count": 0})
    metrics = {"step_time_s": step_time, "history": {"train_loss": [x if math.isfinite(x) else None for x in losses]}}
    if s:
        metrics["images_per_s"] = a.batch / step_time["median"]
        if is_bert:
            metrics["tokens_per_s"] = a.batch * tokens_per_sample / step_time["median"]
    if compile_error:
        metrics["error"] = compile_error
    memory = {}
    context = {"framework": "pytorch", "torch_version": torch.__version__, "git_sha": git_sha(),
               "host": socket.gethostname(), "cpu": platform.processor() or platform.machine(),
               "device": str(dev), "python": platform.python_version(),
               "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if cuda:
        p = torch.cuda.get_device_properties(dev)
        context["device_properties"] = {
            "device_name": p.name, "compute_capability": f"{p.major}.{p.minor}",
            "total_memory_bytes": str(p.total_memory), "multiprocessors": str(p.multi_processor_count),
            "cuda_runtime": str(torch.version.cuda), "cudnn": str(torch.backends.cudnn.version()),
            "matmul_allow_tf32": str(torch.backends.cuda.matmul.allow_tf32).lower(),
            "cudnn_allow_tf32": str(torch.backends.cudnn.allow_tf32).lower(),
            "cudnn_benchmark": str(torch.backends.cudnn.benchmark).lower()}
        memory = {k: int(v) for k, v in torch.cuda.memory_stats(dev).items() if isinstance(v, (int, float))}
        memory["allocated_bytes.all.peak"] = int(torch.cuda.max_memory_allocated(dev))
        memory["reserved_bytes.all.peak"] = int(torch.cuda.max_memory_reserved(dev))
    config = {"model": a.model, "dataset": "synthetic-seq" if is_bert else "synthetic", "batch": a.batch, "num_classes": a.classes,
              "steps": a.steps, "warmup": a.warmup, "optimizer": a.optimizer, "lr": a.lr,
              "momentum": a.momentum, "weight_decay": a.weight_decay, "allow_tf32": a.allow_tf32,
              "cudnn_benchmark": a.cudnn_benchmark, "mode": a.mode, "seed": a.seed, **shape_cfg}
    params = sum(t.numel() for t in model.parameters())
    metrics["parameters"] = params
    # oomlab's results schema 2: memory per device plus totals (one device here).
    memory = {"devices": {str(dev): memory}, "totals": dict(memory)} if memory else {}
    return {"schema_version": SCHEMA_VERSION, "command": "torch_reference", "context": context,
            "config": config, "metrics": metrics, "memory": memory}




def main(argv):
    try:
        a = parse_args(argv)
        doc = run(a)
        write_json_atomic(a.json, doc)
    except UsageError as exc:
        print(f"torch_reference: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"torch_reference: error: {exc} (needs torch, torchvision; transformers for bert-*)", file=sys.stderr)
        return 2
    m = doc["metrics"]
    if "error" in m:
        print(f"torch_reference: {a.model} {a.mode}: {m['error']}")
    else:
        peak = doc["memory"].get("totals", {}).get("allocated_bytes.all.peak")
        print(f"torch_reference: {a.model} batch {a.batch} {a.mode} tf32={a.allow_tf32}: step "
              f"{m['step_time_s']['median'] * 1e3:.2f} ms (p10 {m['step_time_s']['p10'] * 1e3:.2f}, "
              f"p90 {m['step_time_s']['p90'] * 1e3:.2f}), peak allocated "
              f"{'-' if peak is None else f'{peak / 2**20:.1f} MiB'} -> {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
