#!/usr/bin/env python3
"""Validate oomlab results files (reports/results/*.json) against the results schema.

Every file must be strict JSON (no NaN/Infinity tokens, no overflowing numbers, no
duplicate keys) with schema_version 2, an `experiment` equal to the file's stem, the
provenance `context` (with `devices`: logical -> physical), `config` (with the profile),
`source`, `points`, `summary`, a `verdict` and the `runner` counts. Each point is a
matrix point: `name`, `command`, `args`, `outcome` (status ok|oom|diverged|error|crash|timeout),
`config`, `metrics`, and `memory` ({} or {"devices": {name: stats}, "totals": stats});
experiments with a known layout (01_vgg16_memory, 02_memory_vs_batch) get their
summary checked too. Standard library only: usable with any python3.
Also imported by make_report.py (load_results, validate, ResultsError).
Usage: check_results.py [FILE_OR_DIR ...]   (default: reports/results). Exit 1 on error.
"""
import argparse
import json
import math
import sys
from pathlib import Path

SCHEMA_VERSION = 2
CONTEXT_KEYS = ("git_sha", "build_type", "compiler", "blas", "host", "device", "date",
                "oomlab_version")
TOP_KEYS = ("schema_version", "experiment", "context", "config", "source", "points",
            "summary", "verdict", "runner")
OUTCOMES = ("ok", "oom", "diverged", "error", "crash", "timeout")
VERDICTS = ("confirmed", "refuted", "depends")
REPO_ROOT = Path(__file__).resolve().parent.parent


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


def load_results(path):
    """Parse and validate one results file; returns the document or raises ResultsError."""
    path = Path(path)
    try:
        doc = parse_strict(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise ResultsError(f"{path}: not strict JSON: {exc}") from exc
    errors = validate(doc, path.stem)
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

def validate(doc, stem=None):
    """Return a list of schema violations (empty when the document is valid)."""
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
    if structured and name in EXPERIMENT_VALIDATORS:
        EXPERIMENT_VALIDATORS[name](doc, err)
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


# ---- per-experiment layouts -----------------------------------------------------------------

TOTALS_01 = ("activation_values_per_image", "params", "forward_only_bytes_per_image",
             "training_bytes_per_image", "training_over_forward")


def _validate_01(doc, err):
    summary = doc["summary"]
    layers = summary.get("layers")
    if err.need(isinstance(layers, list) and layers, "summary.layers missing or empty"):
        for i, layer in enumerate(layers):
            where = f"summary.layers[{i}]"
            if not err.need(isinstance(layer, dict), f"{where} is not an object"):
                continue
            err.need(isinstance(layer.get("name"), str), f"{where}.name missing")
            err.need(isinstance(layer.get("type"), str), f"{where}.type missing")
            shape = layer.get("output_shape")
            shape_ok = err.need(isinstance(shape, list) and 1 <= len(shape) <= 4 and
                                all(is_count(d) and d > 0 for d in shape),
                                f"{where}.output_shape must be a list of positive ints ([C,H,W])")
            values = layer.get("output_values")
            if err.need(is_count(values), f"{where}.output_values must be a count") and shape_ok:
                err.need(math.prod(shape) == values,
                         f"{where}.output_values {values} != product of output_shape {shape}")
            err.need(is_count(layer.get("params")), f"{where}.params must be a count")
            err.need(is_bytes(layer.get("saved_bytes")), f"{where}.saved_bytes must be >= 0")
    totals = summary.get("totals")
    if err.need(isinstance(totals, dict), "summary.totals missing"):
        ok = True
        for key in TOTALS_01:
            ok &= err.need(is_num(totals.get(key)) and totals.get(key) >= 0,
                           f"summary.totals.{key} missing or negative")
        if ok:
            fwd, train = totals["forward_only_bytes_per_image"], totals["training_bytes_per_image"]
            if fwd > 0:
                err.need(math.isclose(totals["training_over_forward"], train / fwd, rel_tol=1e-3),
                         "summary.totals.training_over_forward != training/forward bytes")


METRICS_02 = ("model", "optimizer", "batch", "peak_allocated_bytes", "formula_bytes",
              "formula_error_pct", "params_bytes", "grads_bytes", "optimizer_state_bytes",
              "activation_bytes", "input_bytes")
FIT_KEYS_02 = ("model", "optimizer", "static_bytes", "per_sample_bytes", "formula_static_bytes",
               "formula_per_sample_bytes")


def _validate_02(doc, err):
    seen = set()
    rows = doc["summary"].get("rows")
    if not err.need(isinstance(rows, list) and rows, "summary.rows missing or empty"):
        return
    for i, m in enumerate(rows):
        where = f"summary.rows[{i}]"
        if not err.need(isinstance(m, dict), f"{where} is not an object"):
            continue
        missing = [k for k in METRICS_02 if k not in m]
        if not err.need(not missing, f"{where} missing {missing}"):
            continue
        err.need(isinstance(m["model"], str) and m["model"], f"{where}.model not a string")
        err.need(isinstance(m["optimizer"], str) and m["optimizer"],
                 f"{where}.optimizer not a string")
        err.need(is_count(m["batch"]) and m["batch"] > 0, f"{where}.batch not a positive int")
        err.need(is_num(m["formula_error_pct"]), f"{where}.formula_error_pct not a number")
        for key in METRICS_02[3:]:
            if key != "formula_error_pct":
                err.need(is_bytes(m[key]), f"{where}.{key} not a byte count >= 0")
        combo = (m["model"], m["optimizer"], m["batch"])
        err.need(combo not in seen, f"{where}: duplicate (model, optimizer, batch) {combo}")
        seen.add(combo)
    fits = doc["summary"].get("fits")
    if err.need(isinstance(fits, list), "summary.fits missing or not a list"):
        pairs = {(m, o) for m, o, _ in seen}
        for i, fit in enumerate(fits):
            where = f"summary.fits[{i}]"
            if not err.need(isinstance(fit, dict), f"{where} is not an object"):
                continue
            missing = [k for k in FIT_KEYS_02 if k not in fit]
            if not err.need(not missing, f"{where} missing {missing}"):
                continue
            for key in FIT_KEYS_02[2:]:
                err.need(is_num(fit[key]), f"{where}.{key} not a number")
            err.need((fit["model"], fit["optimizer"]) in pairs,
                     f"{where}: no points for ({fit['model']}, {fit['optimizer']})")


EXPERIMENT_VALIDATORS = {
    "01_vgg16_memory": _validate_01,
    "02_memory_vs_batch": _validate_02,
}


# ---- CLI --------------------------------------------------------------------------------------

def collect(paths):
    files = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(p.glob("*.json")))
        elif p.exists():
            files.append(p)
        elif p.suffix != ".json":  # a results directory not created yet (git keeps no empty dirs)
            print(f"check_results: note: no directory {p}")
        else:
            raise SystemExit(f"check_results: {p}: no such file or directory")
    return files


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=[str(REPO_ROOT / "reports" / "results")],
                    help="results files or directories (default: reports/results)")
    args = ap.parse_args(argv)
    files = collect(args.paths)
    if not files:
        print("check_results: no results files found (nothing to check)")
        return 0
    failed = 0
    for path in files:
        try:
            doc = load_results(path)
        except ResultsError as exc:
            failed += 1
            print(f"FAIL {exc}")
            continue
        print(f"ok   {path} ({doc['experiment']}, {len(doc['points'])} points, "
              f"verdict {doc['verdict']['status']})")
    print(f"check_results: {len(files) - failed}/{len(files)} valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
