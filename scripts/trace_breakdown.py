#!/usr/bin/env python3
"""Where a training step's time goes, from an `oomlab train --chrome-trace` file.

The trace has one span per layer forward ("layer1.0.bn1/fwd") and per backward node
("layer1.0.bn1/batch_norm/bwd"). A forward span is attributed to the op its layer's
backward spans name (the module bn1 -> batch_norm; a layer whose backward holds several
ops, as BERT's attention core, is listed as "fwd of <ops>"); layers without backward
spans keep their module name. A forward span of an op inside its layer ("<layer>/bmm/fwd",
as the composed attention records its steps) counts for that op, and its layer's span keeps
only the time between them. Prints, per op kind: forward ms, backward ms, share of all spans, and
the span count, summed over the whole trace (or the steps after --skip-steps K: a step starts
where the trace's first span name recurs after a backward pass, so that the first step's
one-off work, such as cuDNN's algorithm selection, can be left out), and the 10 longest single spans.
Spans nest where one op runs others: under activation checkpointing a backward span holds the
forward spans of the segment it recomputes. Each span counts its own time only (its time less
its children's, on the same thread), and a forward span inside a backward one is counted as
recomputation (a "recomp ms" column, shown when there is any), so no time is counted twice;
only a top-level span starts a step.
Clock (--clock): a span's host time (its "dur") or its device time (args.device_us: CUDA
events on the compute stream at the span's start and end, recorded by oomlab on a GPU with
no synchronisation; it includes device idle time where the host sets the pace); auto, the
default, takes device time when the trace has it (spans without it, such as communication
streams, are then left out and counted). Host time of asynchronous launches means nothing
unless oomlab ran with OOMLAB_CUDA_SYNC=1 (each launch waits for its kernel).

Usage: python3 scripts/trace_breakdown.py TRACE.json [--top N] [--skip-steps K] [--clock auto|host|device]
Exit status 2 with one line on a missing or malformed file.
"""
import argparse
import collections
import json
import sys


class TraceError(Exception):
    pass


def load_spans(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise TraceError(f"cannot read {path}: {exc}") from None
    events = doc.get("traceEvents", doc) if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e and "name" in e]


def nest(spans):
    """Each span with "parent" (the innermost span on its thread that encloses it, by host
    time; None at the top) and "in_bwd" (whether a backward span encloses it), in time order."""
    spans = sorted(spans, key=lambda e: (e.get("ts", 0), -e["dur"]))
    open_spans = collections.defaultdict(list)   # (pid, tid) -> the enclosing spans, innermost last
    out = []
    for e in spans:
        stack = open_spans[(e.get("pid"), e.get("tid"))]
        ts = e.get("ts", 0)
        while stack and stack[-1].get("ts", 0) + stack[-1]["dur"] <= ts:
            stack.pop()
        parent = stack[-1] if stack else None
        e = dict(e, parent=parent, in_bwd=bool(parent) and (parent["in_bwd"] or is_backward(parent)))
        stack.append(e)
        out.append(e)
    return out


def is_backward(e):
    parts = e["name"].split("/")
    return len(parts) >= 3 and parts[-1] == "bwd"


def after_steps(spans, k):
    """The spans from the start of step k + 1 on. A step begins with the first span's name at
    the top level after a backward span: a recomputed first layer (nested in a backward span)
    starts none, nor does the forward after a forward-only pass (checkpointing's probe
    forward, checkpoint_plan.cpp), which joins the step it precedes."""
    if k == 0:
        return spans
    starts, after_backward = [], True
    for i, e in enumerate(spans):
        after_backward = after_backward or is_backward(e)
        if e["name"] == spans[0]["name"] and e["parent"] is None and after_backward:
            starts.append(i)
            after_backward = False
    if len(starts) <= k:
        raise TraceError(f"the trace holds {len(starts)} step(s) (by its first span, {spans[0]['name']!r}); "
                         f"cannot skip {k}")
    return spans[starts[k]:]


def device_us(e):
    args = e.get("args")
    return args.get("device_us") if isinstance(args, dict) else None


def with_clock(spans, clock):
    """(spans with "t", their time in us under the clock, and "self", t less their children's
    t, the clock's name, spans left out)."""
    if clock == "auto":
        clock = "device" if any(device_us(e) is not None for e in spans) else "host"
    if clock == "host":
        timed, name, left_out = [dict(e, t=e["dur"]) for e in spans], "host time", 0
    else:
        timed = [dict(e, t=device_us(e)) for e in spans if device_us(e) is not None]
        if not timed:
            raise TraceError("no span carries device time (args.device_us): a trace from a GPU run of oomlab has it")
        name, left_out = "device time (CUDA events)", len(spans) - len(timed)
    children = collections.defaultdict(float)   # id(parent as nest() made it) -> its children's time
    for e in timed:
        if e["parent"] is not None:
            children[id(e["parent"])] += e["t"]
    originals = [e for e in spans if not (clock == "device" and device_us(e) is None)]
    for e, orig in zip(timed, originals):
        e["self"] = max(e["t"] - children[id(orig)], 0.0)
    return timed, name, left_out


def breakdown(spans):
    ops_of_module = collections.defaultdict(set)
    for e in spans:
        if is_backward(e):
            parts = e["name"].split("/")
            ops_of_module[parts[0]].add(parts[-2])
    # One backward op: the layer is that op. Several (attention core): "fwd of a, b, ...".
    op_of_module = {m: next(iter(ops)) if len(ops) == 1 else "fwd of " + ", ".join(sorted(ops))[:36]
                    for m, ops in ops_of_module.items()}
    rows = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])   # op -> [fwd us, bwd us, recompute us, count]
    for e in spans:
        parts = e["name"].split("/")
        backward = is_backward(e)
        op_span = len(parts) >= 3   # "<layer>/<op>/fwd|bwd": a node's, or an op's inside its layer
        row = rows[parts[-2] if op_span else op_of_module.get(parts[0], parts[0])]
        row[1 if backward else 2 if e["in_bwd"] else 0] += e["self"]
        row[3] += 1
    return rows


def print_rows(rows, clock, left_out):
    total = sum(f + b + r for f, b, r, _ in rows.values())
    recompute = any(r for _, _, r, _ in rows.values())
    extra = f"{'recomp ms':>10}" if recompute else ""
    print(f"{'op':<44}{'fwd ms':>10}{'bwd ms':>10}{extra}{'share':>8}{'spans':>7}")
    for op, (f, b, r, n) in sorted(rows.items(), key=lambda kv: -sum(kv[1][:3])):
        extra = f"{r / 1e3:>10.2f}" if recompute else ""
        print(f"{op:<44}{f / 1e3:>10.2f}{b / 1e3:>10.2f}{extra}{(f + b + r) / max(total, 1e-9):>8.1%}{n:>7}")
    print(f"{'all spans':<44}{total / 1e3:>20.2f} ms {clock}, each span's own time" +
          (f" ({left_out} spans without device time left out)" if left_out else ""))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--skip-steps", type=int, default=0)
    p.add_argument("--clock", choices=("auto", "host", "device"), default="auto")
    a = p.parse_args(argv)
    if a.skip_steps < 0:
        print("trace_breakdown: error: --skip-steps must be >= 0", file=sys.stderr)
        return 2
    try:
        spans = nest(load_spans(a.trace))
        spans = after_steps(spans, a.skip_steps) if spans else spans
        spans, clock, left_out = with_clock(spans, a.clock) if spans else (spans, "", 0)
    except TraceError as exc:
        print(f"trace_breakdown: error: {exc}", file=sys.stderr)
        return 2
    if not spans:
        print(f"trace_breakdown: error: {a.trace}: no spans", file=sys.stderr)
        return 2
    print_rows(breakdown(spans), clock, left_out)
    print(f"longest {a.top} spans:")
    for e in sorted(spans, key=lambda e: -e["t"])[:a.top]:
        print(f"  {e['name']:<48}{e['t'] / 1e3:>10.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
