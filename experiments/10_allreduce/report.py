"""report.py — the report section of experiment 10_allreduce (T7): per-rank traffic
of ring and parameter server against the formulas (cpu threads and meta ranks), the server's
staging memory on meta, bus bandwidth per backend at the largest size, the alpha-beta fits,
the backends at the step model's gradient size, and the model on the published anchors.
One figure: (left) busbw against size at 2 ranks per series; (right) the fitted models'
time against ranks up to 1024 for ring and parameter server, with the measured points.

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import fmt_bytes, md_table


def plot_10(doc, path):
    s = doc["summary"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name, by_n in sorted(s["series"].items()):
        if "2" in by_n:
            rows = by_n["2"]["rows"]
            a.plot([r["bytes"] for r in rows], [r["busbw_GBps"] for r in rows], marker="o", ms=3, label=name)
    a.set_xscale("log", base=2)
    a.set_xlabel("size (bytes)")
    a.set_ylabel("busbw (GB/s), out of place")
    a.set_title("2 ranks on this machine", fontsize=10)
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
    for name in ("local-ring", "local-ps"):
        pred = s["predictions"].get(name)
        if not pred:
            continue
        line, = b.plot([p["ranks"] for p in pred], [p["time_us"] / 1e3 for p in pred], label=f"{name} model")
        size = pred[0]["bytes"]
        meas = [(int(n), next((r["time_us"] for r in v["rows"] if r["bytes"] == size), None))
                for n, v in s["series"].get(name, {}).items()]
        meas = sorted((n, t) for n, t in meas if t is not None)
        if meas:
            b.plot([m[0] for m in meas], [m[1] / 1e3 for m in meas], "o", color=line.get_color(),
                   label=f"{name} measured")
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("ranks")
    b.set_ylabel("all-reduce time (ms)")
    size = next(iter(s["predictions"].values()))[0]["bytes"] if s["predictions"] else 0
    b.set_title(f"alpha-beta model at {fmt_bytes(size)}" if size else "alpha-beta model", fontsize=10)
    b.grid(alpha=0.3)
    if s["predictions"]:
        b.legend(fontsize=8)
    else:   # every fit missed its own measurements: nothing is extrapolated
        b.text(0.5, 0.5, "no predictions: every fit has r2 < 0.9\n(see the fits table)", ha="center", va="center",
               transform=b.transAxes, fontsize=9)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    s, src = doc["summary"], doc["source"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n", "\n### Ours: per-rank traffic at the largest size\n"]
    rows = []
    for t in s["traffic"]:
        rows.append([t["series"], t["device"], t["ranks"], fmt_bytes(t["bytes"]), fmt_bytes(t["received_rank0"]),
                     fmt_bytes(t["received_rank1"]), fmt_bytes(t["expected_bottleneck"]),
                     f"{100 * t['worst_relative_miss']:.2g}%"])
    parts.append(md_table(["series", "device", "ranks", "size S", "rank 0 received", "rank 1 received",
                           "formula (busiest rank)", "worst miss"], rows))
    parts.append("\n**Server memory on meta** (peak allocated per device; the server stages every worker's "
                 "buffer):\n")
    parts.append(md_table(["series", "ranks", "rank 0 peak", "rank 1 peak"],
                          [[m["series"], m["ranks"], fmt_bytes(m["peak_rank0"]), fmt_bytes(m["peak_rank1"])]
                           for m in s["meta_memory"]]))
    parts.append("\n**Bus bandwidth at the largest size** (nccl-tests' busbw = algbw x 2(n-1)/n; memcpy: one "
                 "thread, same run):\n")
    rows = []
    for name, by_n in sorted(s["series"].items()):
        for n, v in sorted(by_n.items(), key=lambda kv: int(kv[0])):
            r = v["rows"][-1]
            rows.append([name, n, fmt_bytes(r["bytes"]), f"{r['time_us']:.0f}", f"{r['busbw_GBps']:.2f}",
                         f"{r['in_place_busbw_GBps']:.2f}", f"{v['memcpy_GBps']:.2f}"])
    parts.append(md_table(["series", "ranks", "size", "time (us)", "busbw out-of-place", "busbw in-place",
                           "memcpy GB/s"], rows))
    parts.append("\n**Alpha-beta fits** (time = fixed + alpha x 2(n-1) + beta x bytes received by the busiest "
                 "rank; least squares of the relative error):\n")
    parts.append(md_table(["series", "fixed (us)", "alpha (us/step)", "1/beta (GB/s)", "r2 of log time", "samples"],
                          [[k, f"{f['fixed_us']:.1f}", f"{f['alpha_us']:.2f}", f"{f['bandwidth_GBps']:.2f}",
                            f"{f['r2_log_time']:.3f}", f["samples"]] for k, f in sorted(s["fits"].items())]))
    pred = s["predictions"]
    withheld = [f"{k} ({f['predictions_withheld']})" for k, f in sorted(s["fits"].items()) if "predictions_withheld" in f]
    if withheld:
        parts.append("\nNo extrapolation from a fit that misses its own measurements: predictions withheld for "
                     + ", ".join(withheld) + ".\n")
    if "local-ring" in pred and "local-ps" in pred:
        parts.append("\n**The model to 1024 ranks** (local fits, the largest measured size):\n")
        parts.append(md_table(["ranks", "ring time (ms)", "ring bytes per rank", "ps time (ms)", "ps bytes at rank 0"],
                              [[r["ranks"], f"{r['time_us'] / 1e3:.2f}", fmt_bytes(r["bottleneck_bytes"]),
                                f"{p['time_us'] / 1e3:.2f}", fmt_bytes(p["bottleneck_bytes"])]
                               for r, p in zip(pred["local-ring"], pred["local-ps"])]))
    b = s.get("backends", {})
    if "compute_step_s" in b:
        parts.append(f"\n**Backends at the {src.get('step_model')} gradient** ({fmt_bytes(b['gradient_bytes'])}; "
                     f"compute step {b['compute_step_s']:.3f} s at batch {src.get('step_batch')}, no overlap):\n")
        rows = []
        for n in sorted((k for k in b if k.isdigit()), key=int):
            for name, v in sorted(b[n].items()):
                rows.append([n, name, f"{v['all_reduce_us']:.0f}", f"{v['step_s']:.4f}"])
        parts.append(md_table(["ranks", "series", "all-reduce (us)", "step (s)"], rows))
    an = s.get("anchors", {})
    if an:
        parts.append("\n**The model on the published anchors** (inputs: published throughput, the anchor's "
                     "busbw or link speed, our zoo's parameter counts; fp32 gradients, no overlap):\n")
        rows = []
        for prec, v in sorted(an.get("dle_resnet50", {}).items()):
            rows.append([f"DLE ResNet-50 8 GPUs {prec}", f"{v['compute_s'] * 1e3:.1f} ms compute, "
                         f"{v['all_reduce_s'] * 1e3:.2f} ms all-reduce at 370 GB/s busbw",
                         f"{v['model_scaling']:.2f}x", f"{v['published_scaling']}x"])
        for name, v in sorted(an.get("horovod", {}).items()):
            rows.append([f"Horovod {name} 512 GPUs", f"{v['all_reduce_s'] * 1e3:.0f} ms ring all-reduce on 25 Gbit/s; "
                         f"implied compute {v['implied_compute_s'] * 1e3:.0f} ms ({v['gflops']} GFLOPs/img)",
                         "(input)", f"{100 * v['published_efficiency']:.0f}% efficiency"])
        parts.append(md_table(["anchor", "model inputs", "model", "published"], rows))
        dle = an.get("dle_resnet50", {})
        if "tf32" in dle and "amp" in dle:
            t, a = dle["tf32"], dle["amp"]
            parts.append(f"\nThe pure communication model over-predicts DeepLearningExamples' scaling: an all-reduce "
                         f"of ResNet-50's gradient costs {t['all_reduce_s'] * 1e3:.2f} ms against a "
                         f"{a['compute_s'] * 1e3:.0f}-{t['compute_s'] * 1e3:.0f} ms step, so the model gives "
                         f"{t['model_scaling']:.2f}x (TF32) and {a['model_scaling']:.2f}x (AMP) where "
                         f"{t['published_scaling']}x and {a['published_scaling']}x were measured. The lost scaling is "
                         "not bandwidth but what the model lacks (input pipeline, synchronisation, stragglers), and "
                         "it grows as AMP shortens the compute step.\n")
        hv = an.get("horovod", {})
        if "resnet101" in hv and "vgg16" in hv:
            r, v = hv["resnet101"], hv["vgg16"]
            parts.append(f"\nHorovod: without overlap the published efficiencies need compute steps of "
                         f"{r['implied_compute_s'] * 1e3:.0f} ms (ResNet-101) and {v['implied_compute_s'] * 1e3:.0f} ms "
                         f"(VGG-16): VGG-16's gradient is {v['params'] / r['params']:.1f}x larger for "
                         f"{v['gflops'] / r['gflops']:.1f}x the FLOPs per image, which orders the two as published, "
                         "but the implied compute times are inputs the model cannot check without the runs' step "
                         "times.\n")
    plot_10(doc, out_dir / "figures/10_allreduce.png")
    parts.append("\n![10_allreduce](figures/10_allreduce.png)\n")
    return "\n".join(parts), ["figures/10_allreduce.png"]


FIGURES = ["figures/10_allreduce.png"]
