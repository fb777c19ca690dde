#!/usr/bin/env python3
"""PyTorch eager side of the GPU kit (scripts/gpu_run.sh): one process, many configs.

Each config is a tag (CONFIGS below): model (torchvision resnet50 / vgg16, Hugging Face
BertForSequenceClassification at bert-base size with eager or sdpa attention), batch,
sequence length, precision (fp32 strict | tf32 | bf16 | fp16 autocast with GradScaler),
optimizer, gradient checkpointing, cudnn.benchmark; the GRAPHED tags capture the step whole
with torch.cuda.graph and replay it (build_graphed); the CHANNELS_LAST tags run model and
input in torch.channels_last; the PINNED tags keep the host batch in page-locked memory and
copy it with non_blocking=True (DataLoader's pin_memory=True recipe). A step is what `oomlab train` times:
host batch copied to the device, forward, cross-entropy, backward, optimizer step,
loss.item(); `--warmup` untimed steps, then `--steps` timed ones, each between
torch.cuda.synchronize() calls. Peak: torch.cuda.max_memory_allocated() after a reset
(it includes the cuBLAS workspace PyTorch takes from its allocator).

Modes:
  --serve          read commands from stdin, one per line, answer one JSON line each on
                   stdout (flushed): `run TAG [ROUND]` (the config's record, with "round"
                   when given: gpu_run.sh's OOMLAB_KIT_REPEAT), `profile TAG FILE`
                   (torch.profiler's table of 3 steps, sorted by CUDA time, into FILE),
                   `quit`. So the kit alternates oomlab and PyTorch runs without paying
                   PyTorch's import once per config.
  --dry-run        with --serve: no PyTorch, every command answered {"tag", "error": "dry
                   run ..."}; gpu_run.sh's dry run (CI) so exercises the kit's protocol.
  --list           print the tags.
  TAG ...          run these tags and print their records.
Baselines (issue 54): a tag may end in @best or @compile. TAG@best is PyTorch's best eager
configuration of TAG's step (BEST_EAGER: channels-last model and input for the CNNs under
AMP, SDPA attention for BERT and the exports, AdamW with fused=True, SGD with foreach=True);
TAG@compile is TAG@best's model under torch.compile (default mode): its first warm-up step,
which compiles, is timed apart as "compile_s" and never among the timed steps. Every record
has "baseline" (eager | best | compile), "p10_ms" / "p90_ms" (gpu_rounds.py marks a pair whose
p90/p10 exceeds 1.3 on either side as noisy) and the host's 1-minute load average.
--device cpu runs the same steps on the CPU (autocast on the CPU, no CUDA timing or memory
stats: peaks are null), with --batch to shrink the configs: the CPU check of the variants
(tests/test_gpu_tools.py, where torch is installed).
A failing config answers {"tag", "error"} and the process goes on. Records also go to
--out (appended, one line each) when given.
Exit status 2 with one line `torch_bench: error: ...` when PyTorch or CUDA is missing.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

# tag -> (model, batch, seq, precision, optimizer, attention, gradient checkpointing, cudnn benchmark)
CONFIGS = {
    "r50_fp32": ("resnet50", 128, 0, "fp32", "sgd", "", False, False),
    "r50_tf32": ("resnet50", 128, 0, "tf32", "sgd", "", False, False),
    "r50_tf32_bench": ("resnet50", 128, 0, "tf32", "sgd", "", False, True),
    "r50_bf16": ("resnet50", 128, 0, "bf16", "sgd", "", False, False),
    "r50_fp16": ("resnet50", 128, 0, "fp16", "sgd", "", False, False),
    "vgg16_tf32": ("vgg16", 64, 0, "tf32", "sgd", "", False, False),
    "bert_fp32": ("bert-base", 32, 128, "fp32", "adamw", "eager", False, False),
    "bert_tf32": ("bert-base", 32, 128, "tf32", "adamw", "eager", False, False),
    "bert_bf16": ("bert-base", 32, 128, "bf16", "adamw", "eager", False, False),
    "bert_fp16": ("bert-base", 32, 128, "fp16", "adamw", "eager", False, False),
    "bert_fp32_sdpa": ("bert-base", 32, 128, "fp32", "adamw", "sdpa", False, False),   # issue 31's fp32 bar
    "bert_tf32_sdpa": ("bert-base", 32, 128, "tf32", "adamw", "sdpa", False, False),
    "bert_bf16_sdpa": ("bert-base", 32, 128, "bf16", "adamw", "sdpa", False, False),
    "bert384_none": ("bert-base", 24, 384, "tf32", "adamw", "eager", False, False),
    "bert384_all": ("bert-base", 24, 384, "tf32", "adamw", "eager", True, False),
    "bert384_none_sdpa": ("bert-base", 24, 384, "tf32", "adamw", "sdpa", False, False),
    "bert384_bf16_sdpa": ("bert-base", 24, 384, "bf16", "adamw", "sdpa", False, False),   # beside bert384_fused_bf16
    # the twins of gpu_run.sh's graph_* pairs: models/graphs/'s exports as PyTorch runs them
    # (1000 classes, no dropout, BERT without an attention mask; GPT-2's next-token loss)
    "graph_r50_tf32": ("resnet50-export", 64, 0, "tf32", "sgd", "", False, False),
    "graph_bert_tf32": ("bert-export", 32, 128, "tf32", "adamw", "sdpa", False, False),
    "graph_gpt2_tf32": ("gpt2-export", 8, 128, "tf32", "adamw", "sdpa", False, False),
    # gpu_run.sh's --cuda-graphs row: the same step captured whole with torch.cuda.graph
    "r50_bf16_cudagraphs": ("resnet50", 128, 0, "bf16", "sgd", "", False, False),
    # gpu_run.sh's --channels-last rows: model and input in torch.channels_last
    "r50_tf32_cl": ("resnet50", 128, 0, "tf32", "sgd", "", False, False),
    "r50_bf16_cl": ("resnet50", 128, 0, "bf16", "sgd", "", False, False),
    # experiment 18's gpu profile: its twins at the batch its oomlab points take
    "r50_bf16_b64": ("resnet50", 64, 0, "bf16", "sgd", "", False, False),
    "r50_bf16_cl_b64": ("resnet50", 64, 0, "bf16", "sgd", "", False, False),
    # gpu_run.sh's --pin-memory row (the source's trick 10, experiment 09's GPU point)
    "r50_tf32_pin": ("resnet50", 128, 0, "tf32", "sgd", "", False, False),
}
# Tags whose step PyTorch captures whole and replays (build_graphed): PyTorch's CUDA-graphs
# notes' whole-network capture, as --cuda-graphs does it.
GRAPHED = {"r50_bf16_cudagraphs"}
# Tags run in torch.channels_last (model.to(memory_format=...) and each batch copied to the
# device in it: PyTorch's recipe, as --channels-last does it).
CHANNELS_LAST = {"r50_tf32_cl", "r50_bf16_cl", "r50_bf16_cl_b64"}
# Tags whose host batch is page-locked (Tensor.pin_memory(), what DataLoader(pin_memory=True)
# hands the loop) and copied with non_blocking=True, as --pin-memory does it.
PINNED = {"r50_tf32_pin"}


# PyTorch's best eager configuration (TAG@best; TAG@compile compiles it): what a user who
# cares about speed runs. The CNNs go channels-last under AMP (tensor cores' layout), attention
# goes through SDPA, the optimizers take their fastest implementation.
BEST_EAGER = {"channels_last_under_amp": True, "attention": "sdpa", "adamw": {"fused": True},
              "sgd": {"foreach": True}}
BASELINES = ("eager", "best", "compile")


class BenchError(Exception):
    pass


def split_tag(tag):
    """'r50_bf16@best' -> ('r50_bf16', 'best'); a plain tag is PyTorch eager as configured."""
    base, _, baseline = tag.partition("@")
    return base, baseline or "eager"


def known(tag):
    base, baseline = split_tag(tag)
    return base in CONFIGS and baseline in BASELINES and not (baseline != "eager" and base in GRAPHED)


def build_export_twin(torch, name, batch, seq, attn, dev, wrap):
    """The PyTorch model of a models/graphs/ export, as the export has it, and its fwd() through
    wrap(model) (torch.compile for @compile)."""
    if name == "resnet50-export":
        import torchvision
        model = torchvision.models.resnet50(weights=None).to(dev)
        run_model = wrap(model)
        x, y = torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,))
        return model, lambda: (run_model(x.to(dev)), y.to(dev))
    import transformers as tf
    ids = torch.randint(1, 30000, (batch, seq))
    if name == "bert-export":
        model = tf.BertForSequenceClassification(tf.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                                               attn_implementation=attn)).to(dev)
        run_model = wrap(model)
        y = torch.randint(0, 2, (batch,))
        return model, lambda: (run_model(input_ids=ids.to(dev)).logits, y.to(dev))
    model = tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                             attn_implementation=attn)).to(dev)
    run_model = wrap(model)
    target = torch.cat([ids[:, 1:], torch.full((batch, 1), -100)], 1)   # next tokens, the last ignored

    def fwd():
        logits = run_model(input_ids=ids.to(dev)).logits
        return logits.reshape(-1, logits.shape[-1]), target.reshape(-1).to(dev)
    return model, fwd


def build_graphed(torch, tag):
    """A torchvision model's SGD step captured whole with torch.cuda.graph, as PyTorch's CUDA
    graphs notes capture a training step: 3 warm-up steps on a side stream from static input
    and target, zero_grad(set_to_none=True) before the capture, autocast without its weight
    cache inside it. Each timed step copies the host batch into the static tensors, replays,
    and reads the loss (loss.item()), as the eager step does."""
    model_name, batch, seq, prec, opt_name, attn, gc, bench = CONFIGS[tag]
    if model_name not in ("resnet50", "vgg16") or opt_name != "sgd" or prec == "fp16":
        raise BenchError(f"{tag}: graphs are set up for torchvision models with SGD without GradScaler")
    import torchvision
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    torch.backends.cudnn.allow_tf32 = prec != "fp32"
    torch.backends.cudnn.benchmark = bench
    dev = torch.device("cuda")
    model = getattr(torchvision.models, model_name)(weights=None, num_classes=10).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    amp = {"bf16": torch.bfloat16}.get(prec)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.randn(batch, 3, 224, 224), torch.randint(0, 10, (batch,))
    static_x, static_y = x.to(dev), y.to(dev)

    def forward_backward_step():
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None, cache_enabled=False):
            loss = loss_fn(model(static_x).float(), static_y)
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            forward_backward_step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = forward_backward_step()

    def step():
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        static_loss.item()
    return model, opt, step


def cnn(model_name):
    return model_name in ("resnet50", "vgg16")


def effective(tag):
    """What TAG's step runs: (model, batch, seq, precision, optimizer, attention, checkpointing,
    benchmark, channels_last, optimizer keyword arguments, baseline)."""
    base, baseline = split_tag(tag)
    model_name, batch, seq, prec, opt_name, attn, gc, bench = CONFIGS[base]
    best = baseline != "eager"
    channels_last = base in CHANNELS_LAST or (best and cnn(model_name) and prec in ("bf16", "fp16") and
                                              BEST_EAGER["channels_last_under_amp"])
    if best and attn:
        attn = BEST_EAGER["attention"]
    opt_kwargs = dict(BEST_EAGER[opt_name]) if best else {}
    return model_name, batch, seq, prec, opt_name, attn, gc, bench, channels_last, opt_kwargs, baseline


def build(torch, tag, device="cuda", batch_override=None):
    if split_tag(tag)[0] in GRAPHED:
        return build_graphed(torch, split_tag(tag)[0])
    model_name, batch, seq, prec, opt_name, attn, gc, bench, channels_last, opt_kwargs, baseline = effective(tag)
    batch = batch_override or batch
    torch.manual_seed(0)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        torch.backends.cudnn.allow_tf32 = prec != "fp32"
        torch.backends.cudnn.benchmark = bench
    dev = torch.device(device)
    wrap = torch.compile if baseline == "compile" else (lambda m: m)
    if model_name.endswith("-export"):
        model, fwd = build_export_twin(torch, model_name, batch, seq, attn, dev, wrap)
    elif model_name == "bert-base":
        from transformers import BertConfig, BertForSequenceClassification
        cfg = BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2, num_labels=2,
                         attn_implementation=attn)
        model = BertForSequenceClassification(cfg).to(dev)
        if gc:
            model.gradient_checkpointing_enable()
        run_model = wrap(model)
        ids = torch.randint(1, 30522, (batch, seq))
        labels = torch.randint(0, 2, (batch,))
        mask = torch.ones(batch, seq, dtype=torch.long)

        def fwd():
            return run_model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits, labels.to(dev)
    else:
        import torchvision
        model = getattr(torchvision.models, model_name)(weights=None, num_classes=10).to(dev)
        x = torch.randn(batch, 3, 224, 224)
        y = torch.randint(0, 10, (batch,))
        pinned = base_pinned(tag) and device == "cuda"
        if pinned:
            x, y = x.pin_memory(), y.pin_memory()
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model = model.to(memory_format=fmt)
        run_model = wrap(model)

        def fwd():
            return run_model(x.to(dev, memory_format=fmt, non_blocking=pinned)), y.to(dev, non_blocking=pinned)
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4, **opt_kwargs)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, **opt_kwargs)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
    scaler = torch.amp.GradScaler(device) if prec == "fp16" else None
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=amp, enabled=amp is not None):
            logits, tgt = fwd()
            loss = loss_fn(logits.float(), tgt)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        loss.item()
    return model, opt, step


def base_pinned(tag):
    return split_tag(tag)[0] in PINNED


def percentile(sorted_values, q):
    """The q-quantile (0..1) of sorted values, linearly interpolated (numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def run(torch, tag, steps, warmup, device="cuda", batch_override=None):
    model_name, batch, seq, prec, opt_name, attn, gc, bench, channels_last, opt_kwargs, baseline = effective(tag)
    if baseline == "compile" and warmup < 1:
        raise BenchError(f"{tag}: @compile needs --warmup >= 1 (its first step compiles)")
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    load = os.getloadavg()[0]
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model, opt, step = build(torch, tag, device, batch_override)
    times, compile_s = [], None
    for i in range(warmup + steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if i == 0 and baseline == "compile":
            compile_s = time.perf_counter() - t0   # the step that compiled: never a timed one
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    ordered = sorted(times)
    rec = {"tag": tag, "side": "torch", "baseline": baseline, "device": device, "model": model_name,
           "batch": batch_override or batch, "seq": seq, "precision": prec, "optimizer": opt_name,
           "optimizer_kwargs": opt_kwargs, "attention": attn, "channels_last": channels_last,
           "gradient_checkpointing": gc, "cudnn_benchmark": bench, "steps": steps,
           "median_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * ordered[0], "max_ms": 1e3 * ordered[-1],
           "p10_ms": 1e3 * percentile(ordered, 0.1), "p90_ms": 1e3 * percentile(ordered, 0.9),
           "load_avg_1m": load,
           "peak_allocated": torch.cuda.max_memory_allocated() if cuda else None,
           "peak_reserved": torch.cuda.max_memory_reserved() if cuda else None}
    if compile_s is not None:
        rec["compile_s"] = compile_s
    del model, opt, step
    return rec


def profile(torch, tag, path):
    from torch.profiler import profile as tprof, ProfilerActivity
    model, opt, step = build(torch, tag)
    step()
    with tprof(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as pr:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    with open(path, "w") as f:
        f.write(pr.key_averages().table(sort_by="cuda_time_total", row_limit=40))
    del model, opt, step
    return {"tag": tag, "side": "torch", "profile": path}


def answer(rec, out):
    line = json.dumps(rec)
    print(line, flush=True)
    if out:
        out.write(line + "\n")
        out.flush()


def guarded(fn, tag, *args):
    if not known(tag):
        return {"tag": tag, "side": "torch", "error": f"unknown config (known: {', '.join(CONFIGS)}, each also as "
                f"TAG@best and TAG@compile except {', '.join(sorted(GRAPHED))})"}
    try:
        return fn(*args)
    except Exception as e:   # one config's failure is its record, the process goes on
        traceback.print_exc(file=sys.stderr)
        return {"tag": tag, "side": "torch", "error": repr(e)[:400]}


def with_round(rec, words):
    """`run TAG ROUND` (gpu_run.sh's OOMLAB_KIT_REPEAT): the record carries its round."""
    if words[0] == "run" and len(words) == 3 and words[2].isdigit():
        rec["round"] = int(words[2])
    return rec


def serve_dry_run(out_path):
    """--serve --dry-run: the protocol without PyTorch: a versions line, then one answer per
    command, each an error record saying no PyTorch ran."""
    out = open(out_path, "a") if out_path else None
    answer({"tag": "_versions", "side": "torch", "dry_run": True}, out)
    for line in sys.stdin:
        words = line.split()
        if words and words[0] == "quit":
            break
        if words:
            answer(with_round({"tag": words[1] if len(words) > 1 else "?", "side": "torch",
                               "error": "dry run: PyTorch was not run"}, words), out)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tags", nargs="*")
    p.add_argument("--serve", action="store_true")
    p.add_argument("--list", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--batch", type=int, help="every config's batch (a CPU check's small steps)")
    a = p.parse_args()
    if a.list:
        print("\n".join(CONFIGS))
        return 0
    if a.steps < 1 or a.warmup < 0 or (a.batch is not None and a.batch < 1):
        raise BenchError("--steps must be >= 1, --warmup >= 0 and --batch >= 1")
    if a.dry_run:
        return serve_dry_run(a.out)
    try:
        import torch
    except ImportError as e:
        raise BenchError(f"PyTorch is not importable ({e})")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise BenchError("PyTorch sees no CUDA device")
    out = open(a.out, "a") if a.out else None
    meta = {"side": "torch", "torch": torch.__version__, "device": a.device, "cpu_threads": torch.get_num_threads()}
    if a.device == "cuda":
        meta.update({"cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                     "gpu": torch.cuda.get_device_name(),
                     "nccl": ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else None})
    answer({"tag": "_versions", **meta}, out)
    run_args = (a.steps, a.warmup, a.device, a.batch)
    if not a.serve:
        for tag in a.tags:
            answer(guarded(run, tag, torch, tag, *run_args), out)
        return 0
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] == "run" and len(words) in (2, 3) and (len(words) == 2 or words[2].isdigit()):
            answer(with_round(guarded(run, words[1], torch, words[1], *run_args), words), out)
        elif words[0] == "profile" and len(words) == 3:
            answer(guarded(profile, words[1], torch, words[1], words[2]), out)
        else:
            answer({"tag": "?", "side": "torch", "error": f"unknown command: {line.strip()}"}, out)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"torch_bench: error: {e}", file=sys.stderr)
        sys.exit(2)
