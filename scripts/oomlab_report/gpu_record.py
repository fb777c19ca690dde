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
A GPU kit's record (scripts/gpu_run.sh's folder: no run*/, a logs.tar.gz) is one call named
"kit", read from the archive without extracting it: res/oomlab_<tag>.json, res/meta_<tag>.json
(the meta device's prediction of the same flags, Record.meta), res/torch.jsonl (scripts/
torch_bench.py's lines: gradient_checkpointing / attention name what gc / attn did),
logs/test_cuda_models*.log; and tests.json beside it (Record.tests). PyTorch's `profile`
answers carry their run's tag but no measurement: they are skipped.
Contract: load_record() never raises on a missing or broken file; what cannot be read is
absent from the maps and named in Record.problems, and the accessors return None for it.
Standard library only.
"""
import json
import re
import tarfile
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
        self.meta = {}        # (run, tag) -> the meta device's results document (kit records)
        self.test_logs = {}   # run -> [text of a test_cuda_models*.log]
        self.tests = None     # a kit record's tests.json

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


def _parse_json(rec, text, where):
    try:
        return json.loads(text)
    except ValueError:
        rec.problems.append(f"{where}: not JSON")
        return None


def _add_oomlab(rec, run, stem, doc):
    if isinstance(doc, dict) and "metrics" in doc and "config" in doc:   # an oomlab results file
        if stem.startswith("meta_"):
            rec.meta[(run, stem[len("meta_"):])] = doc
        else:
            rec.oomlab[(run, stem[len("oomlab_"):] if stem.startswith("oomlab_") else stem)] = doc


def _add_torch_lines(rec, run, text, where):
    rec.torch_runs.add(run)
    for n, line_text in enumerate(text.splitlines(), 1):
        line = _parse_json(rec, line_text, f"{where} line {n}")
        if isinstance(line, dict) and isinstance(line.get("tag"), str) and "profile" not in line:
            rec.torch[(run, line["tag"])] = line   # a later line of a tag replaces an earlier one


def _load_runs(rec):
    for run in rec.runs:
        for f in sorted((rec.folder / run / "res").glob("*.json")):
            _add_oomlab(rec, run, f.stem, _read_json(rec, f))
        rec.test_logs[run] = [log.read_text(encoding="utf-8", errors="replace")
                              for log in sorted((rec.folder / run / "logs").glob("test_cuda_models*.log"))]
        jsonl = rec.folder / run / "res" / "torch.jsonl"
        if jsonl.is_file():
            _add_torch_lines(rec, run, jsonl.read_text(encoding="utf-8", errors="replace"), f"{run}/res/torch.jsonl")


KIT_MEMBER = re.compile(r"^(?:\./)?(res/(?:oomlab|meta)_[\w.-]+\.json|res/torch\.jsonl|logs/test_cuda_models[\w.-]*\.log)$")


def _load_kit(rec):
    """A kit record: its one call, "kit", from logs.tar.gz (read in memory, never extracted)."""
    rec.runs = ["kit"]
    rec.test_logs["kit"] = []
    try:
        with tarfile.open(rec.folder / "logs.tar.gz", "r:gz") as tar:
            for m in sorted((m for m in tar.getmembers() if m.isfile() and KIT_MEMBER.match(m.name)),
                            key=lambda m: m.name):
                name = KIT_MEMBER.match(m.name).group(1)
                text = tar.extractfile(m).read().decode("utf-8", errors="replace")
                if name.endswith(".log"):
                    rec.test_logs["kit"].append(text)
                elif name.endswith(".jsonl"):
                    _add_torch_lines(rec, "kit", text, f"logs.tar.gz:{name}")
                else:
                    _add_oomlab(rec, "kit", Path(name).stem, _parse_json(rec, text, f"logs.tar.gz:{name}"))
    except (OSError, tarfile.TarError, EOFError) as exc:
        rec.problems.append(f"logs.tar.gz: unreadable ({type(exc).__name__})")
    tests = rec.folder / "tests.json"
    if tests.is_file():
        doc = _read_json(rec, tests)
        rec.tests = doc if isinstance(doc, dict) else None


def is_kit_record(folder):
    folder = Path(folder)
    return (folder / "logs.tar.gz").is_file() and not any(p.is_dir() for p in folder.glob("run*"))


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
    if is_kit_record(rec.folder):
        _load_kit(rec)
    else:
        _load_runs(rec)
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
    par = cfg.get("parallel")
    variant = [f"{par.upper()} on {cfg.get('devices')} devices" + (" + SyncBN" if cfg.get("sync_bn") else "")
               if isinstance(par, str) and par not in ("none", "single") else "",
               fused_attention_kernels(props, cfg.get("amp") in ("bf16", "fp16") or bool(cfg.get("half")))
               if cfg.get("attention") == "fused" else "",
               "cuDNN benchmark" if props.get("cudnn_benchmark") == "true" else "",
               "channels_last" if cfg.get("channels_last") else "",
               "CUDA graphs" if cfg.get("cuda_graphs") else "",
               "pinned batches" if cfg.get("pin_memory") else "",
               *switched_paths(cfg, props)]
    return {"model": model, "batch": cfg.get("batch"),
            "seq": cfg.get("seq_len") if str(model).startswith("bert") else None,
            "precision": precision, "checkpoint": cfg.get("checkpoint") or "none",
            "device": cfg.get("device"), "variant": ", ".join(v for v in variant if v) or None}


def fused_attention_kernels(props, cfg_16bit):
    """Which CUDA kernels ran --attention fused (cuda_settings.h's switches; the 16-bit mma
    kernels, then the tensor-core ones, take 16-bit inputs (tc_attention_inputs "16-bit"), and in records without that
    property also float32 ones when TF32 matmuls were allowed). No tiled_attention property:
    a run from before the tiled kernels existed."""
    tf32_tc = props.get("matmul_allow_tf32") == "true" and "tc_attention_inputs" not in props
    if props.get("mma_attention") == "true" and cfg_16bit:   # OOMLAB_CUDA_MMA_ATTENTION=1 (not yet measured)
        return "fused attention (16-bit mma kernels)"
    if props.get("tc_attention") == "true" and (cfg_16bit or tf32_tc):
        return "fused attention (tensor-core kernels)"
    if props.get("flash_attention") == "true":
        return "fused attention (flash kernels)"
    return "fused attention (tiled kernels)" if props.get("tiled_attention") == "true" \
        else "fused attention (reference kernels)"


# The issue-31 switches of older records (cuda_settings.h from cbc8729 to aa21f01; the old paths
# were deleted after aa21f01's H100 run, so newer records name none), their defaults, and how a
# row that ran the other way is labelled.
ISSUE31_PATHS = [("vectorized_elementwise", "true", "scalar elementwise"), ("bn_one_pass", "true", "three-pass BN"),
                 ("foreach_optimizer", "true", "per-tensor optimizer"),
                 ("token_inputs_on_device", "true", "host token inputs")]


def switched_paths(cfg, props):
    """The paths a run took other than today's defaults (cuda_settings.h), so that a switched
    row is not labelled as its default: records from before the flip name all four old paths
    as one, "issue-31 paths off"."""
    off = [text for key, dflt, text in ISSUE31_PATHS if props.get(key) not in (None, dflt)]
    names = ["issue-31 paths off"] if len(off) == len(ISSUE31_PATHS) else off
    graph = props.get("cudnn_graph_api")   # "channels_last": auto since aa21f01's H100 run
    if graph == "true" or (graph == "channels_last" and cfg.get("channels_last")):
        names.append("cuDNN graph API")
    if props.get("embedding_split") == "true":   # OOMLAB_CUDA_EMBEDDING_SPLIT=1 (not yet measured)
        names.append("split embedding backward")
    if props.get("bn_cl_one_pass") == "true" and cfg.get("channels_last"):   # OOMLAB_CUDA_BN_CL_ONE_PASS=1
        names.append("one-pass channels_last BN")
    if props.get("ln_unroll") == "true":   # OOMLAB_CUDA_LN_UNROLL=1 (not yet measured)
        names.append("unrolled layer_norm")
    if props.get("dropout_vec") == "true":   # OOMLAB_CUDA_DROPOUT_VEC=1 (not yet measured)
        names.append("vectorized dropout")
    if props.get("copy_fastdiv") == "true":   # OOMLAB_CUDA_COPY_FASTDIV=1 (not yet measured)
        names.append("32-bit copy offsets")
    if props.get("linear_lt") == "true":   # OOMLAB_CUDA_LINEAR_LT=1 (not yet measured)
        names.append("cuBLASLt bias epilogues")
    if props.get("bias_planes") == "true":   # OOMLAB_CUDA_BIAS_PLANES=1 (not yet measured)
        names.append("conv bias by planes")
    if props.get("device_argmax") == "true":
        names.append("device argmax")
    return names + (["fused ReLU"] if cfg.get("fuse_relu") else [])


def describe_torch(line):
    model = line.get("model")
    return {"model": model, "batch": line.get("batch"),
            "seq": line.get("seq", 128) if str(model).startswith("bert") else None,
            "precision": PRECISION_NAMES.get(line.get("precision"), line.get("precision")),
            "checkpoint": "HF gradient checkpointing" if torch_gc(line) else "none",
            "attn": line.get("attn") or line.get("attention") or "eager"}


def torch_gc(line):
    """Whether a PyTorch line ran Hugging Face's gradient checkpointing (gc: the H100 record's
    torchbench.py; gradient_checkpointing: scripts/torch_bench.py)."""
    return bool((line or {}).get("gc") or (line or {}).get("gradient_checkpointing"))


def label(desc):
    """"BERT-base b24 s384 TF32, checkpoint all" from a describe_* dict."""
    text = f"{MODEL_NAMES.get(desc['model'], desc['model'])} b{desc['batch']}"
    if desc.get("seq"):
        text += f" s{desc['seq']}"
    text += f" {desc['precision']}"
    ckpt = desc.get("checkpoint")
    if ckpt not in (None, "none"):
        text += f", {ckpt}" if ckpt.startswith("HF") else f", checkpoint {ckpt}"
    if desc.get("variant"):
        text += f", {desc['variant']}"
    if desc.get("device") not in (None, "cuda", "cuda:0"):
        text += f" ({desc['device']})"
    return text


def sort_key(desc):
    models = list(MODEL_NAMES)
    prec, ckpt = desc["precision"], str(desc.get("checkpoint"))
    return (models.index(desc["model"]) if desc["model"] in models else len(models), desc["batch"] or 0,
            desc.get("seq") or 0, PRECISION_ORDER.index(prec) if prec in PRECISION_ORDER else 9,
            0 if ckpt == "none" else 1 if ckpt.startswith("selective") else 2, ckpt, desc.get("variant") or "")


# ---- figures that only the logs and the README hold --------------------------------------------

INFO_PEAK = re.compile(r"\[\s*INFO\s*\]\s*(\S+): peak (\d+) bytes \(meta (\d+)\), workspace peak (\d+)")


def meta_from_test_logs(rec):
    """[(run, model, cuda peak, meta peak, workspace peak)] from the CUDA model tests' INFO lines."""
    rows = []
    for run in rec.runs:
        for text in rec.test_logs.get(run, []):
            for m in INFO_PEAK.finditer(text):
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
    """(timed steps, warm-up steps or None) per PyTorch config: from the record's torchbench.py,
    else the timed steps its lines state (kit records) when they agree; None otherwise."""
    path = rec.folder / "torchbench.py"
    m = re.search(r"^STEPS,\s*WARM\s*=\s*(\d+),\s*(\d+)", path.read_text(encoding="utf-8"), re.M) \
        if path.is_file() else None
    if m:
        return int(m.group(1)), int(m.group(2))
    steps = {line.get("steps") for line in rec.torch.values() if _num(line.get("steps")) is not None}
    return (steps.pop(), None) if len(steps) == 1 else None
