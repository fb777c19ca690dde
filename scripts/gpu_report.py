#!/usr/bin/env python3
"""gpu_report.py — the GPU kit's output folder from its work folder (scripts/gpu_run.sh).

Reads WORK (res/: the kit's MANIFEST, the run's start (started_at, UTC), nvidia-smi's
line, oomlab / meta results JSON, PyTorch's torch.jsonl, breakdown.txt; tests/: gtest JSON
per binary and rc.txt; logs/: compute-sanitizer logs; run.log) and writes into OUT:
  provenance.json  what check_results checks a GPU record by (oomlab_report/provenance.py):
                   commit (the kit's full sha, from its MANIFEST) and dirty (its tree had
                   uncommitted changes), date (YYYY-MM-DD: res/started_at, else the earliest
                   context.date of oomlab's results; left out when nothing records it),
                   started_at (res/started_at's full UTC timestamp YYYY-MM-DDTHH:MM:SSZ, which
                   orders records of one day: oomlab_report/gpu_order.py; left out without it),
                   machine {gpu, driver, cuda_runtime, compute capability, memory, cuBLAS,
                   cuDNN, NCCL, PyTorch} with each value's source; the kit's build; the
                   commit and dirty flag oomlab itself reported
  tests.json       per test binary: passed, failed, skipped, failing test names, exit
                   status, seconds; sanitizer summaries
  points.json      per configuration: oomlab (step-time median / p10 / p90, peak allocated,
                   workspace peak, its kernel choices summed over layers), PyTorch (median,
                   peak), the meta prediction, and the
                   ratios oomlab / PyTorch and meta / cuda; parallel points per device;
                   with OOMLAB_KIT_REPEAT, "repeated": the rounds' pairs, their ratio's
                   interval and issue 31's bar verdicts (gpu_rounds.py)
  breakdown.txt    copied from res/
  README.md        all of it in words and tables (the experiments' gpu profiles in OUT
                   first: oomlab_report/profile_lines.py), with res/attention_cpu.json (the host
                   CPU's attention: oomlab eager / fused beside PyTorch SDPA,
                   scripts/attention_vs_torch.py) where the run has it
Whatever is missing (a cut-off or failed run) is reported as missing, never invented.
Every file is written whole (temp file + rename). Standard library only.
Usage: python3 gpu_report.py WORK OUT
"""
import json
import os
import re
import sys
from pathlib import Path

import gpu_rounds   # scripts/gpu_rounds.py, beside this file (the kit packs both)
from gpu_rounds import load_json
from oomlab_report import profile_lines   # the experiments' gpu profiles in OUT (the kit packs it)


def write(path, text):
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def dump(obj):
    return json.dumps(obj, indent=1, allow_nan=False, sort_keys=True) + "\n"


DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# gpu_run.sh tags of a switched path run beside their default (the tag without the suffix):
# *_prev (older records: the old paths the defaults replaced, deleted after aa21f01's H100 run),
# *_fuse (--fuse-relu on), *_graph
# (OOMLAB_CUDNN_GRAPH=1), *_legacy (OOMLAB_CUDNN_GRAPH=0 where the graph API is the default:
# under benchmark, on channels_last), *_argmax (older records: OOMLAB_CUDA_DEVICE_ARGMAX=1,
# before the device count became the only path), *_tiled (fused
# attention on the tiled kernels), *_notc (afbeb1e's
# kit: float32 fused attention without the tensor-core kernels), *_cudagraphs (--cuda-graphs), *_cl (--channels-last; its own twin is PyTorch in
# channels_last), *_pin (--pin-memory; its twin is PyTorch with a pinned batch), *_mma (16-bit fused
# attention on mma.sync, OOMLAB_CUDA_MMA_ATTENTION=1), *_next (gpu_run.sh's
# NEXT: paths not yet measured, switched on); older records: *_flash, *_tc (paths then switched on). Ratios are
# "switched over default" (the fields keep their first name, *_next_over_*); "over torch"
# divides by the default's PyTorch eager twin.
SWITCHED_SUFFIXES = ("_next", "_graph", "_flash", "_cudagraphs", "_cl", "_tc", "_prev", "_fuse", "_notc", "_tiled",
                     "_legacy", "_argmax", "_pin", "_mma")


STARTED = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def started_at(res):
    """gpu_run.sh's res/started_at (`date -u +%Y-%m-%dT%H:%M:%SZ`) when it is one such
    timestamp, else None."""
    text = (res / "started_at").read_text().strip() if (res / "started_at").is_file() else ""
    return text if STARTED.match(text) else None


def run_date(res):
    """(YYYY-MM-DD, where it comes from) of the run, as the kit recorded it: gpu_run.sh's
    res/started_at (UTC), else the earliest context.date (UTC) of oomlab's results in res/;
    (None, why) when nothing records it: never invented (check_results then fails the record)."""
    started = (res / "started_at").read_text().strip() if (res / "started_at").is_file() else ""
    if DATE.match(started):
        return started[:10], "res/started_at (gpu_run.sh's start, UTC)"
    dates = []
    for f in sorted(res.glob("*.json")):
        doc = load_json(f)
        ctx = doc.get("context") if isinstance(doc, dict) else None
        if isinstance(ctx, dict) and isinstance(ctx.get("date"), str) and DATE.match(ctx["date"]):
            dates.append((ctx["date"], f.name))
    if dates:
        date, name = min(dates)
        return date[:10], f"res/{name} context.date (UTC), the earliest of the run's oomlab results"
    return None, "not recorded: no res/started_at and no oomlab results JSON with context.date"


def machine(res):
    """(machine, machine_sources): nvidia-smi's line, oomlab's device properties, PyTorch's
    versions; a value nothing recorded is left out (check_results names it)."""
    smi = (res / "nvidia_smi.csv").read_text().strip().split(", ") if (res / "nvidia_smi.csv").exists() else []
    ctx = (load_json(res / "provenance_run.json") or {}).get("context") or {}
    props = dict(ctx.get("device_properties") or {})
    torch = load_json(res / "torch_versions.json") or {}
    smi_src, props_src = "res/nvidia_smi.csv (nvidia-smi)", "res/provenance_run.json context.device_properties"
    torch_src = "res/torch_versions.json (scripts/torch_bench.py)"
    fields = {   # key: [(value, source), ...] in order of preference
        "gpu": [(smi[0] if smi else None, smi_src), (props.get("device_name"), props_src)],
        "driver": [(smi[1] if len(smi) > 1 else None, smi_src)],
        "compute_capability": [(smi[2] if len(smi) > 2 else None, smi_src),
                               (props.get("compute_capability"), props_src)],
        "gpu_memory": [(smi[3] if len(smi) > 3 else None, smi_src)],
        "gpu_memory_bytes": [(props.get("total_memory_bytes"), props_src)],
        "cuda_runtime": [(props.get("cuda_runtime"), props_src)],
        "cublas": [(props.get("cublas"), props_src)], "cudnn": [(props.get("cudnn"), props_src)],
        "nccl": [(torch.get("nccl"), torch_src)], "torch": [(torch.get("torch"), torch_src)],
        "torch_cuda": [(torch.get("cuda"), torch_src)], "torch_cudnn": [(torch.get("cudnn"), torch_src)],
    }
    out, sources = {}, {}
    for key, options in fields.items():
        value, source = next(((v, src) for v, src in options if v not in (None, "")), (None, None))
        if value is None:
            continue
        if key == "gpu_memory_bytes":
            if not str(value).isdigit():
                continue
            value = int(value)
        out[key], sources[key] = (value if key == "gpu_memory_bytes" else str(value).strip()), source
    return out, sources


def provenance(work):
    """provenance.json in the format check_results checks GPU records by
    (oomlab_report/provenance.py): commit (the kit's, full sha, from its MANIFEST), dirty,
    date (YYYY-MM-DD), started_at (the full UTC start), machine {gpu, driver, cuda_runtime, ...}; plus the kit's build and
    what oomlab itself reported (its git sha and dirty flag)."""
    res = work / "res"
    man = load_json(res / "manifest.json") or {}
    ctx = (load_json(res / "provenance_run.json") or {}).get("context") or {}
    date, date_source = run_date(res)
    mach, sources = machine(res)
    prov = {
        "source": "written by scripts/gpu_report.py from the GPU kit's run (scripts/gpu_run.sh)",
        "dry_run": (res / "dry_run").exists(),
        "commit": man.get("commit"), "dirty": man.get("dirty"),
        "commit_source": "the kit's MANIFEST.json (scripts/gpu_pack.sh: git rev-parse HEAD; dirty = "
                         "uncommitted changes to tracked files when packed)",
        "date": date, "date_source": date_source, "started_at": started_at(res),
        "machine": mach, "machine_sources": sources,
        "kit": {k: man[k] for k in ("packed_at", "nvcc", "cuda_architectures", "sm") if man.get(k) is not None},
        "oomlab_git": ctx.get("git_sha"), "oomlab_dirty": ctx.get("git_dirty"),
    }
    return {k: v for k, v in prov.items() if v is not None}


def gtest_summary(path):
    doc = load_json(path)
    if not doc:
        return None
    passed = failed = skipped = 0
    failing = []
    for suite in doc.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite.get('name')}.{t.get('name')}"
            if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                skipped += 1
            elif t.get("failures"):
                failed += 1
                failing.append({"test": name, "message": t["failures"][0].get("failure", "")[:600]})
            else:
                passed += 1
    return {"passed": passed, "failed": failed, "skipped": skipped, "failing": failing}


def tests(work):
    rc = {}
    rc_file = work / "tests" / "rc.txt"
    for line in rc_file.read_text().splitlines() if rc_file.exists() else []:
        m = re.match(r"(\S+) rc=(\d+) (\d+)s", line)
        if m:
            rc[m.group(1)] = {"exit_status": int(m.group(2)), "seconds": int(m.group(3))}
    out = {"binaries": {}, "sanitizers": {}}
    for name, r in sorted(rc.items()):
        if name.startswith("sanitizer_"):
            log = work / "logs" / f"{name}.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            summary = re.findall(r"(ERROR SUMMARY: .*|RACECHECK SUMMARY: .*)", text)
            out["sanitizers"][name[len("sanitizer_"):]] = {
                **r, "summary": summary[-1].strip() if summary else None,
                "cases_ok": len(re.findall(r"^\[       OK \]", text, re.M))}
        else:
            out["binaries"][name] = {**r, **(gtest_summary(work / "tests" / f"{name}.json") or
                                             {"note": "no gtest report (crashed or cut off)"})}
    return out


def oomlab_point(doc):
    if not doc:
        return None
    st = doc.get("metrics", {}).get("step_time_s", {}) or {}
    mem = doc.get("memory", {}) or {}
    tot = mem.get("totals", {}) or {}
    p = {"median_ms": 1e3 * st["median"] if st.get("median") is not None else None,
         "p10_ms": 1e3 * st["p10"] if st.get("p10") is not None else None,
         "p90_ms": 1e3 * st["p90"] if st.get("p90") is not None else None,
         "timed_steps": st.get("count"), "peak_allocated": tot.get("allocated_bytes.all.peak"),
         "peak_reserved": tot.get("reserved_bytes.all.peak"), "workspace_peak": tot.get("workspace_bytes.all.peak")}
    losses = (doc.get("metrics", {}).get("history", {}) or {}).get("train_loss")
    if isinstance(losses, list) and losses and isinstance(losses[-1], (int, float)):
        p["final_train_loss"] = losses[-1]
    choices = {}   # the run's kernel choices (results' kernel_choices) summed over layers
    for r in doc.get("kernel_choices", []) if isinstance(doc.get("kernel_choices"), list) else []:
        if isinstance(r, dict) and isinstance(r.get("calls"), int):
            key = f"{r.get('op')}: {r.get('choice')}"
            choices[key] = choices.get(key, 0) + r["calls"]
    if choices:
        p["kernel_choices"] = dict(sorted(choices.items(), key=lambda kv: -kv[1]))
    devs = mem.get("devices")
    if isinstance(devs, dict) and len(devs) > 1:
        p["per_device_peak_allocated"] = {d: (v.get("totals", v) or {}).get("allocated_bytes.all.peak")
                                          for d, v in devs.items() if isinstance(v, dict)}
    return p


def ratio(a, b):
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def points(work):
    res = work / "res"
    torch, torch_by_round = {}, {}
    for line in (res / "torch.jsonl").read_text().splitlines() if (res / "torch.jsonl").exists() else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        # a `profile TAG` answer names the same tag as its `run TAG` record: not a measurement
        if rec.get("tag") and rec["tag"] != "_versions" and "profile" not in rec:
            rnd = rec.get("round", 1)
            torch_by_round.setdefault(rec["tag"], {})[rnd] = rec
            if rnd == 1:
                torch[rec["tag"]] = rec
    tags = sorted({p.stem[len("oomlab_"):] for p in res.glob("oomlab_*.json")} | set(torch))
    rows = {}
    for tag in tags:
        o = oomlab_point(load_json(res / f"oomlab_{tag}.json"))
        m = load_json(res / f"meta_{tag}.json")
        meta_peak = (m or {}).get("memory", {}).get("totals", {}).get("allocated_bytes.all.peak")
        twin = torch.get(tag)
        row = {"oomlab": o, "torch": twin, "meta_peak_allocated": meta_peak}
        if o and twin and "error" not in twin:
            row["time_ratio_oomlab_over_torch"] = ratio(o["median_ms"], twin.get("median_ms"))
            row["peak_ratio_oomlab_over_torch"] = ratio(o["peak_allocated"], twin.get("peak_allocated"))
        if o:
            row["meta_over_cuda_peak"] = ratio(meta_peak, o["peak_allocated"])
        rows[tag] = row
    for tag, rep in gpu_rounds.collect(res, torch_by_round).items():   # OOMLAB_KIT_REPEAT's rounds
        rows[tag]["repeated"] = rep
    for tag, row in rows.items():   # a switched path (gpu_run.sh: *_next, *_graph) beside its default
        suffix = next((s for s in SWITCHED_SUFFIXES if tag.endswith(s)), None)
        base = rows.get(tag[:-len(suffix)]) if suffix else None
        if base and row["oomlab"] and base["oomlab"]:
            row["default_tag"] = tag[:-len(suffix)]
            row["time_ratio_next_over_default"] = ratio(row["oomlab"]["median_ms"], base["oomlab"]["median_ms"])
            row["peak_ratio_next_over_default"] = ratio(row["oomlab"]["peak_allocated"], base["oomlab"]["peak_allocated"])
            twin = base.get("torch") or {}
            if "error" not in twin:
                row["time_ratio_next_over_torch"] = ratio(row["oomlab"]["median_ms"], twin.get("median_ms"))
    return rows


def next_lines(pts):
    """The README's A/B table: each switched row (SWITCHED_SUFFIXES) beside its default."""
    ab = {t: r for t, r in pts.items() if r.get("default_tag")}
    if not ab:
        return []
    lines = ["## Switched GPU paths beside the default (same call; gpu_run.sh's *_prev, *_fuse, *_graph, "
             "*_legacy, *_argmax, *_tiled, *_cudagraphs and *_cl rows)", "",
             "| config | default ms | switched ms | switched / default | switched / PyTorch eager | default peak GB | "
             "switched peak GB | default final loss | switched final loss |", "|---|---|---|---|---|---|---|---|---|"]
    for tag, r in ab.items():
        d, n = pts[r["default_tag"]]["oomlab"], r["oomlab"]
        lines.append(f"| {tag} | {fmt(d.get('median_ms'))} | {fmt(n.get('median_ms'))} | "
                     f"{fmt(r.get('time_ratio_next_over_default'), '.3f')} | "
                     f"{fmt(r.get('time_ratio_next_over_torch'), '.3f')} | "
                     f"{fmt(d.get('peak_allocated') and d['peak_allocated'] / 1e9, '.3f')} | "
                     f"{fmt(n.get('peak_allocated') and n['peak_allocated'] / 1e9, '.3f')} | "
                     f"{fmt(d.get('final_train_loss'), '.5f')} | {fmt(n.get('final_train_loss'), '.5f')} |")
    return lines + [""]


def fmt(v, spec=".1f"):
    return "—" if v is None else format(v, spec)


def attention_cpu_lines(attn):
    """The README table of scripts/attention_vs_torch.py's JSON (the host CPU, not the GPU)."""
    lines = [f"## CPU attention forward + backward: oomlab beside PyTorch SDPA (this machine's CPU, "
             f"{attn.get('threads')} threads, PyTorch {attn.get('torch')}; medians of {attn.get('rounds')} "
             f"alternating rounds)", "",
             "| seq | dropout | oomlab eager ms | oomlab fused ms | PyTorch math ms | PyTorch SDPA ms (backend) | "
             "fused / SDPA |", "|---|---|---|---|---|---|---|"]
    for c in attn.get("cases", []):
        m = c.get("median_ms", {})
        lines.append(f"| {c.get('seq')} | {c.get('dropout')} | {fmt(m.get('oomlab_eager_ms'))} | "
                     f"{fmt(m.get('oomlab_fused_ms'))} | {fmt(m.get('torch_math_ms'))} | "
                     f"{fmt(m.get('torch_sdpa_ms'))} ({c.get('torch_sdpa_backend')}) | "
                     f"{fmt(c.get('oomlab_fused_over_torch_sdpa'), '.2f')} |")
    return lines + [""]


def readme(prov, t, pts, run_log, attn=None, profiles=()):
    m = {k: prov.get("machine", {}).get(k, "unknown") for k in (
        "gpu", "compute_capability", "gpu_memory", "driver", "cuda_runtime", "cublas", "cudnn", "nccl", "torch")}
    kit = {k: prov.get("kit", {}).get(k) or "unknown" for k in ("packed_at", "nvcc")}
    lines = ["# oomlab GPU kit run", ""]
    if prov.get("dry_run") is True:
        lines += ["**DRY RUN** (OOMLAB_KIT_DRY_RUN=1): oomlab ran on the meta device, without a GPU. "
                  "Nothing below is a GPU measurement.", ""]
    lines += [
             f"GPU: {m['gpu']} (compute capability {m['compute_capability']}, {m['gpu_memory']}), "
             f"driver {m['driver']}, CUDA runtime {m['cuda_runtime']}, cuBLAS {m['cublas']}, "
             f"cuDNN {m['cudnn']}, NCCL {m['nccl']}; PyTorch {m['torch']}.",
             f"Run on {prov.get('started_at') or prov.get('date') or 'an unrecorded date'} ({prov.get('date_source')}).",
             f"Kit: commit {prov.get('commit', 'unknown')}"
             f"{' (DIRTY: not committable)' if prov.get('dirty') is True else ''}, "
             f"packed {kit['packed_at']}, {kit['nvcc']}.", ""]
    errors = [l for l in run_log if "error:" in l]
    if errors:
        lines += ["**The run stopped:** " + errors[-1].split("error:", 1)[1].strip(), ""]
    skipped = [l for l in run_log if "skipped:" in l]
    if skipped:
        lines += ["Skipped for the time budget: " + "; ".join(l.split("skipped:", 1)[1].strip() for l in skipped), ""]
    if t["binaries"]:
        lines += ["## Tests", "", "| binary | passed | failed | skipped | exit | s |", "|---|---|---|---|---|---|"]
        for name, b in t["binaries"].items():
            lines.append(f"| {name} | {b.get('passed', '—')} | {b.get('failed', '—')} | {b.get('skipped', '—')} | "
                         f"{b['exit_status']} | {b['seconds']} |")
        failing = [f for b in t["binaries"].values() for f in b.get("failing", [])]
        if failing:
            lines += ["", "Failing: " + ", ".join(f["test"] for f in failing)]
        for tool, s in t["sanitizers"].items():
            lines.append(f"\ncompute-sanitizer {tool} of test_cuda_parity: exit {s['exit_status']}, {s['summary']}, "
                         f"{s['cases_ok']} cases OK, {s['seconds']} s")
        lines.append("")
    lines += list(profiles)
    if pts:
        lines += ["## oomlab beside PyTorch eager (same call, alternating; medians)", "",
                  "| config | oomlab ms | PyTorch ms | time ratio | oomlab peak GB | PyTorch peak GB | peak ratio | meta / cuda peak |",
                  "|---|---|---|---|---|---|---|---|"]
        for tag, r in pts.items():
            o, tw = r["oomlab"] or {}, r["torch"] or {}
            lines.append(
                f"| {tag} | {fmt(o.get('median_ms'))} | {fmt(tw.get('median_ms'))} | "
                f"{fmt(r.get('time_ratio_oomlab_over_torch'), '.2f')} | {fmt(o.get('peak_allocated') and o['peak_allocated'] / 1e9, '.3f')} | "
                f"{fmt(tw.get('peak_allocated') and tw['peak_allocated'] / 1e9, '.3f')} | {fmt(r.get('peak_ratio_oomlab_over_torch'), '.3f')} | "
                f"{fmt(r.get('meta_over_cuda_peak'), '.4f')} |")
        lines.append("")
    lines += gpu_rounds.readme_lines({t: r["repeated"] for t, r in pts.items() if r.get("repeated")})
    lines += next_lines(pts)
    chosen = {tag: r["oomlab"]["kernel_choices"] for tag, r in pts.items() if (r.get("oomlab") or {}).get("kernel_choices")}
    if chosen:
        lines += ["## Convolution algorithms oomlab ran (calls over the run, summed over layers)", ""]
        for tag, c in chosen.items():
            lines.append(f"- {tag}: " + "; ".join(f"{k} x{n}" for k, n in c.items()))
        lines.append("")
    if attn:
        lines += attention_cpu_lines(attn)
    lines += ["## Run log", "", "```", *run_log[-60:], "```", ""]
    return "\n".join(lines)


def main():
    if len(sys.argv) != 3:
        print("gpu_report: error: usage: gpu_report.py WORK OUT", file=sys.stderr)
        return 2
    work, out = Path(sys.argv[1]), Path(sys.argv[2])
    if not work.is_dir():
        print(f"gpu_report: error: {work} is not a folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    prov, t, pts = provenance(work), tests(work), points(work)
    run_log = (work / "run.log").read_text(errors="replace").splitlines() if (work / "run.log").exists() else []
    write(out / "provenance.json", dump(prov))
    write(out / "tests.json", dump(t))
    write(out / "points.json", dump(pts))
    if (work / "res" / "breakdown.txt").exists():
        write(out / "breakdown.txt", (work / "res" / "breakdown.txt").read_text(errors="replace"))
    attn = load_json(work / "res" / "attention_cpu.json")
    write(out / "README.md", readme(prov, t, pts, run_log, attn if isinstance(attn, dict) else None,
                                    profile_lines.lines(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
