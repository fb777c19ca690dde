"""gpu_section.py — REPORT.md's "GPU results" section, from the GPU records committed under
reports/results/gpu/<record>/ (read by gpu_record.py; their provenance is check_results.py's).

render_gpu_section(gpu_dir, experiments_dir, shown_dir) returns the section's markdown, or None
when gpu_dir holds no record. Per record: the provenance paragraph (machine and versions,
commit, each run's local patch and the rows it affects, marked †); T3 (AMP) and T4
(checkpointing) beside the source's figures (read from experiments/05_amp and
06_checkpointing's experiment.json, which cite SOURCE_TABLES.md); oomlab vs PyTorch per
configuration; the meta device's predicted peak vs the CUDA peak; how much the step times of
configurations run in several calls moved; a verdict line per table.
Contracts: every number is computed from the record's files (none is written here); a file
or figure that is not there renders as "missing" (a ratio that cannot be formed as "—"),
never as an error. Which run a table reads is chosen from the files (the run with the most of
the table's configurations; PyTorch's the same run as oomlab's where it can), so every ratio
compares figures of one call, named in the table's call column. Timings are one call
with one median per configuration: "measured once ... inconclusive" (DESIGN.md section 11);
memory is deterministic and is stated as measured. GB = 10^9 bytes throughout. Output is
deterministic (sorted files, no timestamps). Standard library only.
"""
import json
from pathlib import Path

from oomlab_report.fmt import details, md_table
from oomlab_report.gpu_order import newest_first
from oomlab_report.gpu_kit_parts import meta_json_part, rounds_part, tests_part
from oomlab_report.gpu_record import (describe_oomlab, describe_torch, label, load_record, meta_from_readme,
                                      meta_from_test_logs, oomlab_ms, oomlab_peak, oomlab_steps, readme_spread,
                                      sort_key, torch_gc, torch_ms, torch_peak, torch_step_counts)

MISSING = "missing"
PRECISIONS = (("fp32 strict", "fp32"), ("TF32", "tf32"), ("AMP bf16", "bf16"), ("AMP fp16", "fp16"))
T3_MODELS = (("resnet50", 128, None, "r50"), ("bert-base", 32, 128, "bert"))
T4_ROWS = (("none", "bert384_none"), ("selective", "bert384_selective"), ("all", "bert384_all"))
T4_TORCH = (("none", ("bert384_none",)), ("HF gradient checkpointing", ("bert384_gc", "bert384_all")))
TORCH_TWINS = {"bert384_fused": "bert384_none_sdpa", "bert384_fused_bf16": "bert384_bf16_sdpa",   # oomlab's
               "bert_fp32_fused": "bert_fp32_sdpa", "bert_tf32_fused": "bert_tf32_sdpa",   # fused attention
               "bert_bf16_fused": "bert_bf16_sdpa",                                        # vs PyTorch's SDPA
               "bert_bf16_fused_mma": "bert_bf16_sdpa", "bert384_fused_bf16_mma": "bert384_bf16_sdpa"}
RULE = ("inconclusive under the ≥5-alternating-pairs rule (DESIGN.md section 11: timings come from "
        "alternating repeated runs with an interval)")
MACHINE_KEYS = (("gpu", "GPU"), ("compute_capability", "compute capability"), ("driver", "driver"),
                ("cuda_runtime", "CUDA runtime"), ("cublas", "cuBLAS"), ("cudnn", "cuDNN"), ("nccl", "NCCL"),
                ("torch", "PyTorch"))


# ---- formatting -------------------------------------------------------------------------------

def f_ms(x):
    return MISSING if x is None else f"{x:.1f}"


def f_gb(b):
    return MISSING if b is None else f"{b / 1e9:.3f}"


def f_ratio(a, b, digits=2, suffix=""):
    return "—" if a is None or not b else f"{a / b:.{digits}f}{suffix}"


def f_pct(a, base):
    return "—" if a is None or not base else f"{100 * (a / base - 1):+.1f}%"


def f_change(a, base, is_base):
    return "base" if is_base and a is not None else f_pct(a, base)


def patched_runs(rec):
    runs = (rec.prov or {}).get("runs")
    runs = runs if isinstance(runs, dict) else {}
    return {r for r, i in runs.items() if isinstance(i, dict) and i.get("local_patch")}


def call(rec, run):
    return run + ("†" if run in patched_runs(rec) else "")


def pick_run(rec, tags, side="oomlab", prefer=None):
    """The run holding most of `tags` on that side (`prefer`, then the earliest, on a tie), or None."""
    get = rec.oomlab_doc if side == "oomlab" else rec.torch_line
    counts = [(sum(get(r, t) is not None for t in tags), r) for r in rec.runs]
    best = max((c for c, _ in counts), default=0)
    if not best:
        return None
    return prefer if (best, prefer) in counts else next(r for c, r in counts if c == best)


def disagreement(desc, expected):
    """The fields where a file's own config differs from its row's."""
    return [f"{k} {desc.get(k)!r}" for k, v in expected.items() if desc.get(k) != v]


def steps_text(rec, docs):
    counts = sorted({oomlab_steps(d) for d in docs if d and oomlab_steps(d)})
    torch = torch_step_counts(rec)
    return (f"median of {'/'.join(str(int(c)) for c in counts) or MISSING} timed steps for oomlab, "
            f"{torch[0] if torch else MISSING} for PyTorch")


def timing_verdict(rec, docs):
    return f"timing measured once (one call, {steps_text(rec, docs)}); {RULE}"


# ---- provenance -------------------------------------------------------------------------------

def provenance_part(rec, shown_dir, spread):
    p = rec.prov or {}
    m = p.get("machine") if isinstance(p.get("machine"), dict) else {}
    machine = ", ".join(f"{name} {m.get(k) or MISSING}" for k, name in MACHINE_KEYS)
    sha = p.get("commit")
    text = [f"**Provenance.** `{shown_dir}/gpu/{rec.name}/` ({p.get('source') or 'provenance.json missing or unreadable'}). "
            f"Machine: {machine}. Date: {p.get('date') or MISSING}. oomlab at commit "
            f"`{sha[:12] if isinstance(sha, str) else MISSING}`."]
    for run, info in sorted(((p.get("runs") or {}) if isinstance(p.get("runs"), dict) else {}).items()):
        if isinstance(info, dict) and info.get("local_patch"):
            stated = "" if info.get("local_patch_stated_by_record", True) else " (inferred, not stated by the record)"
            text.append(f"{run} ran with a local patch, `{info['local_patch']}`{stated}; it affects "
                        f"{info.get('affects') or MISSING}.")
    said = readme_spread(rec)
    text.append("Rows from a run with a local patch are marked †: their oomlab figures depend on that patch. "
                "Steps this short vary between calls" + (f" (the record's README says {said})" if said else "") +
                (f"; the configurations repeated in several calls moved by up to {spread:.2f}× (last table)"
                 if spread else "") + ", so compare only within one call.")
    if rec.problems:
        text.append("Unreadable or missing: " + "; ".join(rec.problems) + ".")
    out = [f"### Record `{rec.name}`\n", " ".join(text) + "\n"]
    sources = p.get("machine_sources")
    if isinstance(sources, dict) and sources:
        out.append(details("where each version comes from (provenance.json)",
                           md_table(["field", "source"], [[k, v] for k, v in sources.items()], right=set())))
    return out


# ---- T3 ---------------------------------------------------------------------------------------

def t3_part(rec, anchors):
    rows, docs, notes, amp_mem = [], [], [], []
    for model, batch, seq, prefix in T3_MODELS:
        tags = [f"{prefix}_{p}" for _, p in PRECISIONS]
        run = pick_run(rec, tags)
        trun = pick_run(rec, tags, "torch", prefer=run)
        base_doc = rec.oomlab_doc(run, tags[0]) if run else None
        base_line = rec.torch_line(trun, tags[0]) if trun else None
        for (prec, _), tag in zip(PRECISIONS, tags):
            doc = rec.oomlab_doc(run, tag) if run else None
            line = rec.torch_line(trun, tag) if trun else None
            docs.append(doc)
            want = {"model": model, "batch": batch, "seq": seq, "precision": prec}
            for what, desc in (("oomlab " + tag, doc and describe_oomlab(doc)), ("PyTorch " + tag, line and describe_torch(line))):
                if desc and disagreement(desc, want):
                    notes.append(f"{what}: file says {', '.join(disagreement(desc, want))}")
            name = label(dict(want, checkpoint="none", precision=""))
            rows.append([name.strip(), prec, f"{call(rec, run) if run else MISSING} / {trun or MISSING}",
                         f_ms(oomlab_ms(doc)), f_ratio(oomlab_ms(base_doc), oomlab_ms(doc), 2, "×"),
                         f_gb(oomlab_peak(doc)), f_ratio(oomlab_peak(doc), oomlab_peak(base_doc), 3),
                         f_ms(torch_ms(line)), f_ratio(torch_ms(base_line), torch_ms(line), 2, "×"),
                         f_gb(torch_peak(line)), f_ratio(torch_peak(line), torch_peak(base_line), 3)])
            if prec == "AMP bf16":
                amp_mem.append(f"{rows[-1][0]}: {rows[-1][6]} (oomlab), {rows[-1][10]} (PyTorch)")
    head = ["config", "precision", "call (oomlab / PyTorch)", "oomlab ms", "speed-up vs fp32", "oomlab peak GB",
            "peak / fp32", "PyTorch ms", "speed-up vs fp32", "PyTorch peak GB", "peak / fp32"]
    out = ["#### T3: automatic mixed precision (AMP) on the GPU\n",
           "Step time (median) and peak allocated memory per precision; speed-up = fp32 strict ms / ms, "
           "peak / fp32 = peak / fp32 strict peak, each side within its own call. fp32 strict: TF32 off "
           "for matmuls and cuDNN; AMP rows keep TF32 off for matmuls, on for cuDNN, on both sides.\n",
           md_table(head, rows, right=set(range(3, len(head))))]
    if notes:
        out.append("Files whose own config disagrees with their row: " + "; ".join(notes) + ".\n")
    out.append(anchors.t3())
    out.append(f"**Verdict (T3).** AMP speed-ups: {timing_verdict(rec, docs)}. Peak memory: measured "
               f"(deterministic); AMP bf16 peak / fp32 strict peak: {'; '.join(amp_mem)}; the source's BERT: "
               f"{anchors.t3_memory()}.\n")
    return out


# ---- T4 ---------------------------------------------------------------------------------------

def t4_part(rec, anchors):
    run = pick_run(rec, [t for _, t in T4_ROWS])
    base = rec.oomlab_doc(run, T4_ROWS[0][1]) if run else None
    rows, docs = [], []
    for mode, tag in T4_ROWS:
        doc = rec.oomlab_doc(run, tag) if run else None
        docs.append(doc)
        shown = describe_oomlab(doc)["checkpoint"] if doc else mode
        first = mode == T4_ROWS[0][0]
        rows.append([f"oomlab ({call(rec, run) if run else MISSING})", shown, f_ms(oomlab_ms(doc)),
                     f_change(oomlab_ms(doc), oomlab_ms(base), first), f_gb(oomlab_peak(doc)),
                     f_change(oomlab_peak(doc), oomlab_peak(base), first)])
    def t4_line(trun, tags):   # the first of `tags` PyTorch answered in that call
        return next((rec.torch_line(trun, t) for t in tags if trun and rec.torch_line(trun, t)), None)
    truns = [r for r in rec.runs if any(t4_line(r, tags) for _, tags in T4_TORCH)] or [None]
    for trun in truns:
        tbase = t4_line(trun, T4_TORCH[0][1])
        for mode, tags in T4_TORCH:
            line = t4_line(trun, tags)
            first = mode == T4_TORCH[0][0]
            rows.append([f"PyTorch eager ({trun or MISSING})", mode, f_ms(torch_ms(line)),
                         f_change(torch_ms(line), torch_ms(tbase), first), f_gb(torch_peak(line)),
                         f_change(torch_peak(line), torch_peak(tbase), first)])
    mem = "; ".join(f"{r[0]}, {r[1]}: {r[5]}" for r in rows if r[5] != "base")
    rows.append(anchors.t4_row())
    head = ["side (call)", "checkpointing", "ms", "time vs none", "peak GB", "memory vs none"]
    return ["#### T4: activation checkpointing, BERT-base b24 s384 TF32\n",
            "Time overhead and memory change are against the same side's run without checkpointing in "
            "the same call. oomlab's `selective` recomputes the attention core and GELU (the source "
            "checkpoints multi-head self-attention and GELU); PyTorch's is Hugging Face's "
            "`gradient_checkpointing_enable()` (every layer).\n",
            md_table(head, rows, right={2, 3, 4, 5}),
            f"**Verdict (T4).** Time overhead: {timing_verdict(rec, docs)}. Memory change: measured "
            f"(deterministic): {mem}; the source: {rows[-1][5]}.\n"]


# ---- oomlab vs PyTorch, meta vs cuda, repeated configurations -----------------------------------

def comparison_part(rec):
    rows, docs = [], []
    for run in rec.runs:
        entries = sorted(((describe_oomlab(d), t, d) for (r, t), d in rec.oomlab.items() if r == run),
                         key=lambda e: sort_key(e[0]))
        for desc, tag, doc in entries:
            line = (rec.torch_line(run, tag) or rec.torch_line(run, tag.replace("_all", "_gc")) or
                    rec.torch_line(run, TORCH_TWINS.get(tag, "")))
            docs.append(doc)
            what = label(desc) + (" vs HF gradient checkpointing" if torch_gc(line) else "") + \
                (" vs PyTorch SDPA" if line and describe_torch(line)["attn"] == "sdpa" else "")
            none = "—" if run in rec.torch_runs else MISSING   # PyTorch ran none / its file is missing
            rows.append([call(rec, run), what, f_ms(oomlab_ms(doc)), f_ms(torch_ms(line)) if line else none,
                         f_ratio(oomlab_ms(doc), torch_ms(line)), f_gb(oomlab_peak(doc)),
                         f_gb(torch_peak(line)) if line else none, f_ratio(oomlab_peak(doc), torch_peak(line), 3)])
    head = ["call", "config", "oomlab ms", "PyTorch ms", "time ratio", "oomlab peak GB", "PyTorch peak GB", "peak ratio"]
    return ["#### oomlab vs PyTorch eager, same call\n",
            "Every oomlab result of the record beside PyTorch's same configuration in the same call "
            "(— where PyTorch ran none, missing where the call's torch.jsonl is); ratios are oomlab / PyTorch. PyTorch's peak includes the "
            "cuBLAS workspace it takes from its allocator.\n",
            md_table(head, rows, right=set(range(2, len(head)))),
            f"**Verdict (oomlab vs PyTorch).** Time ratios: {timing_verdict(rec, docs)}. Peak ratios: "
            "measured (deterministic).\n"]


def meta_part(rec):
    peaks = {}
    for (run, tag), doc in sorted(rec.oomlab.items()):
        if oomlab_peak(doc) is not None:
            peaks.setdefault(oomlab_peak(doc), []).append(f"{run}/{tag}")
    out = ["#### Meta prediction vs the CUDA peak\n"]
    readme = meta_from_readme(rec)
    if rec.meta:
        out += meta_json_part(rec)
    elif not rec.oomlab and not rec.problems:
        pass   # every file read and no benchmark configuration ran: nothing to predict
    elif readme is None:
        out.append(f"Meta peaks of the benchmark configurations: {MISSING} (no meta-prediction table in "
                   "the record's README).\n")
    else:
        rows, equal, total = [], 0, 0
        for config, metas, cudas in readme:
            for i, meta in enumerate(metas):
                cuda = cudas[i] if i < len(cudas) else (cudas[0] if len(cudas) == 1 else None)
                files = peaks.get(cuda, [])
                total += 1
                equal += cuda == meta and bool(files)
                rows.append([config + (f" [{i + 1}/{len(metas)}]" if len(metas) > 1 else ""), f"{meta:,}",
                             f"{cuda:,}" if files else MISSING, ", ".join(files) or "not in any results file",
                             f_ratio(meta, cuda if files else None, 4)])
        out += ["The meta peaks come from the record's README (the earlier session ran `oomlab train "
                "--device meta` with the same flags on the CPU; no results file of those runs is in the "
                "record); each CUDA peak is looked up in the record's oomlab results JSON.\n",
                md_table(["config (README)", "meta peak B (README)", "cuda peak B (results JSON)",
                          "results file(s)", "meta / cuda"], rows, right={1, 2, 4}),
                f"Equal to the byte: {equal} of {total}.\n"]
    tests = meta_from_test_logs(rec)
    same = sum(cuda == meta for _, _, cuda, meta, _ in tests)
    within = sum(meta <= cuda <= meta + ws for _, _, cuda, meta, ws in tests)
    out.append(f"In the CUDA model tests (`run*/logs/test_cuda_models*.log`, each model's small test "
               f"configuration on both devices), the CUDA allocator's peak equals meta's for {same} of "
               f"{len(tests)} models, and lies between meta's and meta's plus the workspace peak (the test's "
               f"bar: meta allocates no cuDNN or cuBLAS workspace) for {within} of "
               f"{len(tests)}.\n" if tests else f"CUDA model test logs with meta peaks: {MISSING}.\n")
    if tests:
        out.append(details(f"the {len(tests)} test models", md_table(
            ["call", "model", "cuda peak B", "meta peak B", "workspace peak B"],
            [[call(rec, r), m, f"{c:,}", f"{t:,}", f"{w:,}"] for r, m, c, t, w in tests])))
    out.append("**Verdict (meta vs cuda).** Measured (memory is deterministic): the counts above; where "
               "they differ, the ratio column says by how much.\n")
    return out


def repeats_part(rec):
    """Configurations run in more than one call: how far their medians moved; (parts, the
    largest max / min ratio or None)."""
    series = {}
    for (run, tag), doc in rec.oomlab.items():
        series.setdefault(("oomlab", label(describe_oomlab(doc))), {})[run] = (oomlab_ms(doc), oomlab_peak(doc))
    for (run, tag), line in rec.torch.items():
        if "error" not in line:
            d = describe_torch(line)
            key = ("PyTorch", label(d) + (f", {d['attn']} attention" if d["attn"] != "eager" else ""))
            series.setdefault(key, {})[run] = (torch_ms(line), torch_peak(line))
    rows, spread = [], None
    for (side, what), by_run in sorted(series.items()):
        if len(by_run) < 2:
            continue
        times = [t for t, _ in by_run.values() if t]
        spread = max(spread or 0, max(times) / min(times)) if times else spread
        peaks = {p for _, p in by_run.values()}
        rows.append([side, what] + [f_ms(by_run[r][0]) if r in by_run else "—" for r in rec.runs] +
                    [f_ratio(max(times), min(times)) if times else "—", "identical" if len(peaks) == 1 else
                     f"differ by up to {max(peaks) - min(peaks):,} B"])
    if not rows:
        return [], None
    return ["#### The same configuration in several calls\n",
            "Medians (ms) of configurations that ran in more than one call: the spread between calls, "
            "against which the within-call ratios above are to be read.\n",
            md_table(["side", "config"] + [f"{r} ms" for r in rec.runs] + ["max / min", "peak across calls"],
                     rows, right=set(range(2, 3 + len(rec.runs))))], spread


# ---- the source's figures -----------------------------------------------------------------------

class Anchors:
    """The source's T3 / T4 figures, from experiments/05_amp and 06_checkpointing's experiment.json."""

    def __init__(self, experiments_dir):
        self.amp = self._source(experiments_dir, "05_amp")
        self.ckpt = self._source(experiments_dir, "06_checkpointing")

    @staticmethod
    def _source(experiments_dir, name):
        try:
            return json.loads((Path(experiments_dir) / name / "experiment.json").read_text(encoding="utf-8"))["source"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def t3(self):
        times = ((self.amp or {}).get("time_s") or {}).get("bert-base") or {}
        mems = ((self.amp or {}).get("memory_gb") or {}).get("bert-base") or {}
        rows = [[f"BERT, {gpu}", f_ratio(times[gpu][0], times[gpu][1], 2, "×"),
                 f_ratio(mems.get(gpu, [None, None])[1], mems.get(gpu, [None, None])[0], 3)]
                for gpu in sorted(times)]
        if not rows:
            return f"The source's T3 figures: {MISSING} (experiments/05_amp/experiment.json).\n"
        return ("The source's T3 (SOURCE_TABLES.md T3, as `experiments/05_amp/experiment.json` records it: "
                "time per training run and peak memory, without and with AMP fp16); it has no ResNet-50 row, "
                "so only BERT has an anchor:\n\n" +
                md_table(["source", "speed-up with AMP", "peak with AMP / without"], rows))

    def t3_memory(self):
        mems = ((self.amp or {}).get("memory_gb") or {}).get("bert-base") or {}
        return ", ".join(f"{f_ratio(v[1], v[0], 3)} ({gpu})" for gpu, v in sorted(mems.items())) or MISSING

    def t4_row(self):
        c = self.ckpt or {}
        without, with_ = c.get("memory_mb_without"), c.get("memory_mb_with")
        overhead = c.get("time_overhead")
        return ["source (SOURCE_TABLES.md T4, via experiments/06_checkpointing)",
                f"MHSA + GELU, batch {c.get('batch_without', MISSING)}",
                "—", f"{100 * overhead:+.0f}% per epoch" if isinstance(overhead, (int, float)) else MISSING,
                # the source's MB are 10^6 B: in this column's GB (10^9 B), its own figures beside them
                f"{without / 1e3:.3f} → {with_ / 1e3:.3f} (source: {without} → {with_} MB)" if without and with_
                else MISSING, f_pct(with_, without)]


# ---- the section ---------------------------------------------------------------------------------

def render_gpu_section(gpu_dir, experiments_dir, shown_dir="reports/results"):
    gpu_dir = Path(gpu_dir)
    folders = newest_first(d for d in gpu_dir.iterdir() if d.is_dir()) if gpu_dir.is_dir() else []
    if not folders:
        return None
    anchors = Anchors(experiments_dir)
    parts = ['<a id="gpu-results"></a>\n## GPU results\n',
             f"The GPU records committed under `{shown_dir}/gpu/`, one folder per GPU session, as the "
             "session left them plus a `provenance.json` (checked by `scripts/check_results.py`). Every "
             "figure below is computed from the record's files (oomlab's results `run*/res/*.json`, "
             "`run*/res/torch.jsonl`, `provenance.json`; a GPU kit's record, one call named `kit`, holds "
             "them in its `logs.tar.gz` beside `tests.json`); GB = 10^9 bytes. Each record's README has the "
             "rest (tests, sanitizers, traces, per-op time, data parallelism).\n"]
    for folder in folders:
        rec = load_record(folder)
        repeats, spread = repeats_part(rec)
        parts += provenance_part(rec, shown_dir, spread) + tests_part(rec)
        # T3 / T4 only where the record holds one of their configurations (an A/B call may not)
        has = lambda tags: any(rec.oomlab_doc(r, t) or rec.torch_line(r, t) for r in rec.runs for t in tags)
        if has([f"{p}_{q}" for _, _, _, p in T3_MODELS for _, q in PRECISIONS]):
            parts += t3_part(rec, anchors)
        if has([t for _, t in T4_ROWS if t != "bert384_none"]):
            parts += t4_part(rec, anchors)
        if rec.oomlab or rec.problems:   # a file it cannot read renders "missing"
            parts += comparison_part(rec) + rounds_part(rec)
        else:   # every file read, and no pair: a part of the kit (OOMLAB_KIT_TAGS / _TESTS)
            parts.append("This record holds no oomlab / PyTorch pairs (a part of the GPU kit: its tests "
                         "and traces; the record's README has them).\n")
        parts += meta_part(rec) + repeats
    return "\n".join(parts)
