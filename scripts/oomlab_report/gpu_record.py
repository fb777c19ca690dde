"""gpu_record.py — read one committed GPU record (reports/results/gpu/<record>/) for REPORT.md's
GPU appendix (gpu_section.py tabulates it).

A record is the folder a GPU session left, committed as it was, plus our provenance.json
(checked by check_results.py, oomlab_report/provenance.py). What is read:
  provenance.json              machine, date, commit, per run its local patch and what it affects
  run*/res/[oomlab_]<tag>.json `oomlab train --json` results (config, context)
  run*/res/torch.jsonl         one JSON line per PyTorch config (the record's torchbench.py):
                               tag, model, batch, ...; or tag + error for a config that failed
  run*/logs/test_rc.txt        "NAME rc=N" per test binary the session ran (rc_tests)
  run*/logs/*.log              compute-sanitizer summary lines (log_sanitizers)
A GPU kit's record (scripts/gpu_run.sh's folder: no run*/, a logs.tar.gz) is one call named
"kit", read from the archive without extracting it: res/oomlab_<tag>.json, res/meta_<tag>.json
(the meta device's prediction of the same flags, Record.meta), res/torch.jsonl (scripts/
torch_bench.py's lines); and tests.json (Record.tests) and points.json (points_json) beside it.
PyTorch's `profile` answers carry their run's tag but no measurement: they are skipped.
describe_oomlab / label name what a results file ran (its model, precision and every switched
path, so that a switched row is never named as its default).
Contract: load_record() never raises on a missing or broken file; what cannot be read is
absent from the maps and named in Record.problems, and the readers return empty for it.
Standard library only.
"""
import json
import re
import tarfile
from pathlib import Path

MODEL_NAMES = {"resnet50": "ResNet-50", "resnet18": "ResNet-18", "vgg16": "VGG16", "bert-base": "BERT-base"}


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
        jsonl = rec.folder / run / "res" / "torch.jsonl"
        if jsonl.is_file():
            _add_torch_lines(rec, run, jsonl.read_text(encoding="utf-8", errors="replace"), f"{run}/res/torch.jsonl")


KIT_MEMBER = re.compile(r"^(?:\./)?(res/(?:oomlab|meta)_[\w.-]+\.json|res/torch\.jsonl)$")


def _load_kit(rec):
    """A kit record: its one call, "kit", from logs.tar.gz (read in memory, never extracted)."""
    rec.runs = ["kit"]
    try:
        with tarfile.open(rec.folder / "logs.tar.gz", "r:gz") as tar:
            for m in sorted((m for m in tar.getmembers() if m.isfile() and KIT_MEMBER.match(m.name)),
                            key=lambda m: m.name):
                name = KIT_MEMBER.match(m.name).group(1)
                text = tar.extractfile(m).read().decode("utf-8", errors="replace")
                if name.endswith(".jsonl"):
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


# ---- what only the logs and the kit's files hold --------------------------------------------

RC_LINE = re.compile(r"^(\S+) rc=(\d+)\b", re.M)
SANITIZER_SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY: .*")


def rc_tests(rec):
    """{(run, binary): exit status} from run*/logs/test_rc.txt ({} for a kit record)."""
    out = {}
    for run in rec.runs:
        path = rec.folder / run / "logs" / "test_rc.txt"
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        out.update({(run, m.group(1)): int(m.group(2)) for m in RC_LINE.finditer(text)})
    return out


def log_sanitizers(rec):
    """[(run/log name, its last compute-sanitizer summary line)] of run*/logs/*.log."""
    out = []
    for run in rec.runs:
        for log in sorted((rec.folder / run / "logs").glob("*.log")):
            found = SANITIZER_SUMMARY.findall(log.read_text(encoding="utf-8", errors="replace"))
            if found:
                out.append((f"{run}/{log.stem}", found[-1].strip()))
    return out


def points_json(rec):
    """A kit record's points.json (gpu_report.py) as a dict; {} when absent or unreadable."""
    try:
        doc = json.loads((rec.folder / "points.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
