"""results.py — load and validate oomlab results files (reports/results/*.json) against the results schema.

Every file must be strict JSON (no NaN/Infinity tokens, no overflowing numbers, no
duplicate keys) with schema_version 2, an `experiment` equal to the file's stem, the
provenance `context` (with `devices`: logical -> physical), `config` (with the profile),
`source`, `points`, `summary`, a `verdict` (status one of verdict_rule.VERDICTS, "pending GPU"
included, and a reason) and the `runner` counts. Each point is a
matrix point: `name`, `command`, `args`, `outcome` (status ok|oom|diverged|error|crash|timeout|skipped),
`config`, `metrics`, and `memory` ({} or {"devices": {name: stats}, "totals": stats});
the summary must satisfy the schema its experiment folder declares
(experiments/NN_name/summary.schema.json, schema.py). Standard library only: usable with
any python3.
The command line is scripts/check_results.py.
"""
import json
import math
from pathlib import Path

from oomlab_report import schema
from oomlab_report.verdict_rule import VERDICTS

SCHEMA_VERSION = 2
CONTEXT_KEYS = ("git_sha", "build_type", "compiler", "blas", "host", "device", "date",
                "oomlab_version")
TOP_KEYS = ("schema_version", "experiment", "context", "config", "source", "points",
            "summary", "verdict", "runner")
OUTCOMES = ("ok", "oom", "diverged", "error", "crash", "timeout", "skipped")
REPO_ROOT = Path(__file__).resolve().parent.parent.parent


class ResultsError(Exception):
    """A results file that cannot be parsed or does not follow the schema."""


def _reject_constant(name):
    raise ValueError(f"non-finite number token {name!r} (strict JSON has no NaN/Infinity)")


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} overflows to infinity")
    return value


def _no_duplicates(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def parse_strict(text):
    """json.loads that rejects NaN/Infinity, numbers overflowing to inf, duplicate keys."""
    return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                      object_pairs_hook=_no_duplicates)


# The summary of a gpu-profile run (experiments/runner/gpu_claims.h: gpu_claims_summary).
GPU_SUMMARY_SCHEMA = {
    "type": "object", "required": ["device", "on_gpu", "claims"],
    "properties": {
        "device": {"type": "string"}, "on_gpu": {"type": "boolean"},
        "claims": {"type": "array", "items": {
            "type": "object", "required": ["name", "metric", "bound", "judged", "text", "n", "failed_points"],
            "properties": {"name": {"type": "string"}, "metric": {"type": "string"}, "bound": {"type": "string"},
                           "judged": {"type": "string"}, "text": {"type": "string"}, "n": {"type": "integer"},
                           "failed_points": {"type": "array", "items": {"type": "string"}}}}}}}


def load_results(path, experiments_dir=REPO_ROOT / "experiments"):
    """Parse and validate one results file, its summary against the schema its experiment
    folder (experiments_dir/<stem>/summary.schema.json) declares, if any (a gpu-profile run's
    against GPU_SUMMARY_SCHEMA); returns the document or raises ResultsError."""
    path = Path(path)
    try:
        doc = parse_strict(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise ResultsError(f"{path}: not strict JSON: {exc}") from exc
    schema_path = Path(experiments_dir) / path.stem / "summary.schema.json"
    try:
        summary_schema = json.loads(schema_path.read_text(encoding="utf-8")) if schema_path.exists() else None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ResultsError(f"{schema_path}: not JSON: {exc}") from exc
    if isinstance(doc, dict) and isinstance(doc.get("config"), dict) and doc["config"].get("profile") == "gpu":
        summary_schema = GPU_SUMMARY_SCHEMA   # judged by the spec's gpu_claims, not the driver
    errors = validate(doc, path.stem, summary_schema)
    if errors:
        raise ResultsError(f"{path}: " + "; ".join(errors))
    return doc


# ---- small type predicates --------------------------------------------------------------

def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def is_count(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def is_bytes(x):
    return is_num(x) and x >= 0


class _Errors(list):
    def need(self, cond, msg):
        if not cond:
            self.append(msg)
        return cond


# ---- generic schema -----------------------------------------------------------------------

def validate(doc, stem=None, summary_schema=None):
    """Return a list of schema violations (empty when the document is valid); the summary is
    checked against summary_schema (schema.py) when one is given."""
    err = _Errors()
    if not err.need(isinstance(doc, dict), "top level is not an object"):
        return err
    missing = [k for k in TOP_KEYS if k not in doc]
    if not err.need(not missing, f"missing top-level keys {missing}"):
        return err
    err.need(doc["schema_version"] == SCHEMA_VERSION and is_count(doc["schema_version"]),
             f"schema_version is {doc['schema_version']!r}, expected {SCHEMA_VERSION}")
    name = doc["experiment"]
    if err.need(isinstance(name, str) and name, "experiment is not a non-empty string"):
        err.need(stem is None or name == stem,
                 f"experiment {name!r} does not match the file name {stem!r}")
    ctx = doc["context"]
    if err.need(isinstance(ctx, dict), "context is not an object"):
        for key in CONTEXT_KEYS:
            err.need(isinstance(ctx.get(key), str) and ctx.get(key) != "",
                     f"context.{key} missing or not a non-empty string")
        devs = ctx.get("devices")
        err.need(isinstance(devs, list) and devs and
                 all(isinstance(d, dict) and isinstance(d.get("device"), str) and
                     isinstance(d.get("physical"), str) for d in devs),
                 "context.devices must be a non-empty list of {device, physical}")
    cfg = doc["config"]
    if err.need(isinstance(cfg, dict), "config is not an object"):
        err.need(isinstance(cfg.get("profile"), str), "config.profile missing")
    err.need(isinstance(doc["source"], dict), "source is not an object")
    err.need(isinstance(doc["summary"], dict), "summary is not an object")
    verdict = doc["verdict"]
    if err.need(isinstance(verdict, dict), "verdict is not an object"):
        err.need(verdict.get("status") in VERDICTS,
                 f"verdict.status {verdict.get('status')!r} not one of {list(VERDICTS)}")
        err.need(isinstance(verdict.get("reason"), str) and verdict.get("reason", "").strip(),
                 "verdict.reason missing or empty")
    points = doc["points"]
    structured = isinstance(doc["summary"], dict) and isinstance(points, list)
    if err.need(isinstance(points, list), "points is not a list"):
        names = set()
        for i, p in enumerate(points):
            where = f"points[{i}]"
            if not err.need(isinstance(p, dict), f"{where} is not an object"):
                structured = False
                continue
            pname = p.get("name")
            if err.need(isinstance(pname, str) and pname, f"{where}.name missing"):
                err.need(pname not in names, f"{where}.name {pname!r} is not unique")
                names.add(pname)
            for key in ("config", "metrics", "memory", "outcome"):
                if not err.need(isinstance(p.get(key), dict),
                                f"{where}.{key} missing or not an object"):
                    structured = False
            err.need(isinstance(p.get("command"), str) and p.get("command"), f"{where}.command missing")
            err.need(isinstance(p.get("args"), list) and all(isinstance(a, str) for a in p.get("args", [0])),
                     f"{where}.args must be a list of strings")
            outcome = p.get("outcome")
            if isinstance(outcome, dict):
                err.need(outcome.get("status") in OUTCOMES,
                         f"{where}.outcome.status {outcome.get('status')!r} not one of {list(OUTCOMES)}")
                err.need(is_num(outcome.get("seconds")) and outcome["seconds"] >= 0,
                         f"{where}.outcome.seconds missing or negative")
            mem = p.get("memory")
            if isinstance(mem, dict) and mem:
                _validate_memory(mem, where, err)
    if structured and summary_schema is not None:
        err.extend(schema.errors(doc["summary"], summary_schema))
    return err


def _validate_memory(mem, where, err):
    """Schema 2 memory: {"devices": {name: stats}, "totals": stats}, stats numeric."""
    devices, totals = mem.get("devices"), mem.get("totals")
    if not err.need(isinstance(devices, dict) and devices and isinstance(totals, dict),
                    f"{where}.memory must hold devices (non-empty) and totals"):
        return
    for name, stats in list(devices.items()) + [("totals", totals)]:
        ok = isinstance(stats, dict) and all(is_num(v) for v in stats.values())
        err.need(ok, f"{where}.memory {name}: stats must be numbers")
    for key in ("allocated_bytes.all.peak", "allocated_bytes.all.current"):
        if all(isinstance(s, dict) and is_num(s.get(key)) for s in devices.values()) and is_num(totals.get(key)):
            err.need(totals[key] == sum(s[key] for s in devices.values()),
                     f"{where}.memory.totals.{key} is not the sum over the devices")
