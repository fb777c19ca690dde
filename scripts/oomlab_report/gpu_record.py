"""gpu_record.py — read one committed GPU record (reports/results/gpu/<record>/) for REPORT.md's
GPU section (gpu_section.py renders it).

A record is the folder a GPU session left, committed as it was, plus our provenance.json
(checked by check_results.py, oomlab_report/provenance.py). What is read:
  provenance.json              machine, date, commit, per run its local patch and what it affects
  run*/res/[oomlab_]<tag>.json `oomlab train --json` results: step time metrics.step_time_s
                               (median, count; the first step is not timed), peak
                               memory.totals["allocated_bytes.all.peak"], config, context
  run*/res/torch.jsonl         one JSON line per PyTorch config (the record's torchbench.py):
                               tag, model, batch, seq, precision, gc, attn, median_ms,
                               peak_allocated; or tag + error for a config that failed
  run*/logs/test_cuda_models*.log  gtest INFO lines "NAME: peak N bytes (meta M), ..." (the
                               CUDA allocator's peak beside the meta device's, same test)
  README.md                    only its "Meta prediction" table: the meta peaks of the
                               benchmark configurations are in no results file of the record
  torchbench.py                PyTorch's warm-up and timed step counts (STEPS, WARM)
Contract: load_record() never raises on a missing or broken file; what cannot be read is
absent from the maps and named in Record.problems, and the accessors return None for it.
Standard library only.
"""
import json
import re
from pathlib import Path

MODEL_NAMES = {"resnet50": "ResNet-50", "resnet18": "ResNet-18", "vgg16": "VGG16", "bert-base": "BERT-base"}
PRECISION_NAMES = {"fp32": "fp32 strict", "tf32": "TF32", "bf16": "AMP bf16", "fp16": "AMP fp16"}
PRECISION_ORDER = ("fp32 strict", "fp32, cuDNN TF32", "TF32", "AMP bf16", "AMP fp16", "half")
PEAK_KEY = "allocated_bytes.all.peak"


class Record:
    """One GPU record: provenance, oomlab results and PyTorch lines keyed by (run, tag)."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.name = self.folder.name
        self.prov = None
        self.oomlab = {}
        self.torch = {}
        self.problems = []
        self.torch_runs = set()   # the runs whose torch.jsonl was read
        self.runs = sorted(p.name for p in self.folder.glob("run*") if p.is_dir())

    def oomlab_doc(self, run, tag):
        return self.oomlab.get((run, tag))

    def torch_line(self, run, tag):
        line = self.torch.get((run, tag))
        return line if line and "error" not in line else None


def _read_json(rec, path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        rec.problems.append(f"{path.relative_to(rec.folder).as_posix()}: unreadable ({type(exc).__name__})")
        return None


def load_record(folder):
    rec = Record(folder)
    prov_path = rec.folder / "provenance.json"
    if prov_path.is_file():
        prov = _read_json(rec, prov_path)
        rec.prov = prov if isinstance(prov, dict) else None
        if prov is not None and rec.prov is None:
            rec.problems.append("provenance.json: not an object")
    else:
        rec.problems.append("provenance.json missing")
    for run in rec.runs:
        for f in sorted((rec.folder / run / "res").glob("*.json")):
            doc = _read_json(rec, f)
            if isinstance(doc, dict) and "metrics" in doc and "config" in doc:   # an oomlab results file
                rec.oomlab[(run, f.stem[len("oomlab_"):] if f.stem.startswith("oomlab_") else f.stem)] = doc
        jsonl = rec.folder / run / "res" / "torch.jsonl"
        if not jsonl.is_file():
            continue
        rec.torch_runs.add(run)
        for n, text in enumerate(jsonl.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            try:
                line = json.loads(text)
            except ValueError:
                rec.problems.append(f"{run}/res/torch.jsonl line {n}: not JSON")
                continue
            if isinstance(line, dict) and isinstance(line.get("tag"), str):
                rec.torch[(run, line["tag"])] = line   # a later line of a tag replaces an earlier one
    return rec


# ---- measurements ---------------------------------------------------------------------------

def _num(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def oomlab_ms(doc):
    st = ((doc or {}).get("metrics") or {}).get("step_time_s") or {}
    return 1e3 * st["median"] if _num(st.get("median")) is not None else None


def oomlab_steps(doc):
    return _num((((doc or {}).get("metrics") or {}).get("step_time_s") or {}).get("count"))


def oomlab_peak(doc):
    mem = (doc or {}).get("memory") or {}
    return _num((mem.get("totals") or mem).get(PEAK_KEY))


def torch_ms(line):
    return _num((line or {}).get("median_ms"))


def torch_peak(line):
    return _num((line or {}).get("peak_allocated"))


# ---- what a file says it ran ------------------------------------------------------------------

def describe_oomlab(doc):
    """{model, batch, seq, precision, checkpoint, device} from an oomlab results document."""
    cfg = doc.get("config") or {}
    props = (doc.get("context") or {}).get("device_properties") or {}
    if cfg.get("amp") in ("bf16", "fp16"):
        precision = "AMP " + cfg["amp"]
    elif cfg.get("half"):
        precision = "half"
    elif props.get("matmul_allow_tf32") == "true":
        precision = "TF32"
    else:   # PyTorch's defaults: TF32 off for matmuls, on for cuDNN
        precision = "fp32, cuDNN TF32" if props.get("cudnn_allow_tf32") == "true" else "fp32 strict"
    model = cfg.get("model")
    return {"model": model, "batch": cfg.get("batch"),
            "seq": cfg.get("seq_len") if str(model).startswith("bert") else None,
            "precision": precision, "checkpoint": cfg.get("checkpoint") or "none",
            "device": cfg.get("device")}


def describe_torch(line):
    model = line.get("model")
    return {"model": model, "batch": line.get("batch"),
            "seq": line.get("seq", 128) if str(model).startswith("bert") else None,
            "precision": PRECISION_NAMES.get(line.get("precision"), line.get("precision")),
            "checkpoint": "HF gradient checkpointing" if line.get("gc") else "none",
            "attn": line.get("attn", "eager")}


def label(desc):
    """"BERT-base b24 s384 TF32, checkpoint all" from a describe_* dict."""
    text = f"{MODEL_NAMES.get(desc['model'], desc['model'])} b{desc['batch']}"
    if desc.get("seq"):
        text += f" s{desc['seq']}"
    text += f" {desc['precision']}"
    ckpt = desc.get("checkpoint")
    if ckpt not in (None, "none"):
        text += f", {ckpt}" if ckpt.startswith("HF") else f", checkpoint {ckpt}"
    if desc.get("device") not in (None, "cuda", "cuda:0"):
        text += f" ({desc['device']})"
    return text


def sort_key(desc):
    models = list(MODEL_NAMES)
    prec, ckpt = desc["precision"], str(desc.get("checkpoint"))
    return (models.index(desc["model"]) if desc["model"] in models else len(models), desc["batch"] or 0,
            desc.get("seq") or 0, PRECISION_ORDER.index(prec) if prec in PRECISION_ORDER else 9,
            0 if ckpt == "none" else 1 if ckpt.startswith("selective") else 2, ckpt)


# ---- figures that only the logs and the README hold --------------------------------------------

INFO_PEAK = re.compile(r"\[\s*INFO\s*\]\s*(\S+): peak (\d+) bytes \(meta (\d+)\), workspace peak (\d+)")


def meta_from_test_logs(rec):
    """[(run, model, cuda peak, meta peak, workspace peak)] from the CUDA model tests' INFO lines."""
    rows = []
    for run in rec.runs:
        for log in sorted((rec.folder / run / "logs").glob("test_cuda_models*.log")):
            for m in INFO_PEAK.finditer(log.read_text(encoding="utf-8", errors="replace")):
                rows.append((run, m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))))
    return rows


def meta_from_readme(rec):
    """[(config, [meta peaks], [cuda peaks])] from the README's meta-prediction table ("the
    same" in the cuda column repeats the meta figures); None when there is no such table."""
    path = rec.folder / "README.md"
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    start = next((i for i, t in enumerate(lines) if t.startswith("#") and "meta prediction" in t.lower()), None)
    if start is None:
        return None
    rows = []
    for t in lines[start + 1:]:
        if t.startswith("#"):
            break
        cells = [c.strip() for c in t.strip().strip("|").split("|")] if t.startswith("|") else []
        if len(cells) < 3 or set(cells[1]) <= set("-: ") or cells[1].lower().startswith("meta"):
            continue
        meta = [int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\d", cells[1])]
        cuda = meta if "same" in cells[2] else [int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\d", cells[2])]
        rows.append((cells[0].replace("`", ""), meta, cuda))
    return rows


def readme_spread(rec):
    """The between-call variation the record's README states ("±20%"), or None."""
    path = rec.folder / "README.md"
    m = re.search(r"±\s*(\d+(?:\.\d+)?)\s*%", path.read_text(encoding="utf-8", errors="replace")) \
        if path.is_file() else None
    return f"±{m.group(1)}%" if m else None


def torch_step_counts(rec):
    """(timed steps, warm-up steps) per PyTorch config, from the record's torchbench.py, or None."""
    path = rec.folder / "torchbench.py"
    m = re.search(r"^STEPS,\s*WARM\s*=\s*(\d+),\s*(\d+)", path.read_text(encoding="utf-8"), re.M) \
        if path.is_file() else None
    return (int(m.group(1)), int(m.group(2))) if m else None
