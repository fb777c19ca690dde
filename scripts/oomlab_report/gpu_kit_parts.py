"""gpu_kit_parts.py — the parts of REPORT.md's GPU section that only a GPU kit's record has
(scripts/gpu_run.sh's folder, read by gpu_record.py): its tests and sanitizers (tests.json),
the meta device's predicted peak of each benchmark configuration beside the CUDA peak
(res/meta_<tag>.json and res/oomlab_<tag>.json of the same call, in logs.tar.gz), and the
repeated pairs of a run with OOMLAB_KIT_REPEAT (points.json's "repeated" entries, judged by
scripts/gpu_rounds.py when the kit ran: shown as the record has them).
Contracts: every figure comes from the record's files; a record without them renders nothing
(tests_part) or is not passed here (meta_json_part: gpu_section calls it only when
Record.meta holds something); never raises on a malformed file. Standard library only.
"""
import json

from oomlab_report.fmt import md_table
from oomlab_report.gpu_record import describe_oomlab, label, oomlab_peak

MISSING = "missing"


def _int(x):
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def tests_part(rec):
    """The kit's CUDA test binaries (passed / failed / skipped, failing names) and the
    compute-sanitizer runs, from tests.json; [] for a record without one."""
    t = rec.tests
    if not isinstance(t, dict) or not isinstance(t.get("binaries"), dict):
        return []
    rows, failing = [], []
    for name, b in sorted(t["binaries"].items()):
        b = b if isinstance(b, dict) else {}
        rows.append([name] + [str(b[k]) if _int(b.get(k)) is not None else MISSING
                              for k in ("passed", "failed", "skipped", "exit_status")])
        failing += [f"{name}: {f}" for f in b.get("failing") or [] if isinstance(f, str)]
    total = {k: sum(_int(b.get(k)) or 0 for b in t["binaries"].values() if isinstance(b, dict))
             for k in ("passed", "failed", "skipped")}
    out = ["#### CUDA tests and sanitizers (tests.json)\n",
           md_table(["binary", "passed", "failed", "skipped", "exit"], rows, right={1, 2, 3, 4}),
           f"In all: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped"
           + (f"; failing: {'; '.join(failing)}" if failing else "") + ".\n"]
    sans = t.get("sanitizers") if isinstance(t.get("sanitizers"), dict) else {}
    for tool, s in sorted(sans.items()):
        s = s if isinstance(s, dict) else {}
        out.append(f"compute-sanitizer {tool} of test_cuda_parity: exit {s.get('exit_status', MISSING)}, "
                   f"{s.get('summary') or MISSING}, {s.get('cases_ok', MISSING)} cases OK.\n")
    return out


def _requested_at_end(doc):
    """requested_bytes.all.current at the end of the run: the bytes the live tensors asked for
    (PyTorch's stat; no block rounding), or None."""
    mem = (doc or {}).get("memory") or {}
    return _int((mem.get("totals") or {}).get("requested_bytes.all.current"))


def _captured_at(doc):
    """The step a --cuda-graphs run captured (0: it stopped before the capture), or None for
    a run without CUDA graphs."""
    g = ((doc or {}).get("metrics") or {}).get("cuda_graphs")
    return _int(g.get("captured_at_step")) if isinstance(g, dict) else None


def _meta_before_capture(meta_doc, doc):
    """True when the CUDA run captured its graph and the meta run stopped before it (the kit's
    meta runs before 6 steps: 2, inside the graphed step's 3 warm-up steps)."""
    return _captured_at(meta_doc) == 0 and (_captured_at(doc) or 0) > 0


def meta_json_part(rec):
    """Per configuration of the record: the meta device's peak for the same flags (run on the
    GPU machine's CPU in the same call) beside the CUDA run's peak, and whether the bytes the
    live tensors requested at the end of both runs agree."""
    rows, equal, within, req_equal, req_total, early = [], 0, 0, 0, 0, 0
    for (run, tag), meta_doc in sorted(rec.meta.items()):
        doc = rec.oomlab_doc(run, tag)
        meta, cuda = oomlab_peak(meta_doc), oomlab_peak(doc)
        ratio = meta / cuda if meta is not None and cuda else None
        equal += ratio is not None and meta == cuda
        within += ratio is not None and abs(ratio - 1) <= 0.01
        req_meta, req_cuda = _requested_at_end(meta_doc), _requested_at_end(doc)
        req = req_meta - req_cuda if req_meta is not None and req_cuda is not None else None
        req_total += req is not None
        req_equal += req == 0
        mark = " ‡" if _meta_before_capture(meta_doc, doc) else ""
        early += bool(mark)
        rows.append([label(describe_oomlab(doc or meta_doc)), tag, f"{meta:,}" if meta is not None else MISSING,
                     f"{cuda:,}" if cuda is not None else MISSING, f"{ratio:.4f}" if ratio is not None else "—",
                     (f"{req:,}" if req is not None else "—") + mark])
    note = ("" if not early else
            f" ‡ {early} `--cuda-graphs` row(s) whose meta run stopped before the capture (it ran the "
            "kit's then 2 steps; a graphed run warms up 3 and captures the 4th): the CUDA run's end holds "
            "the graph's pool, with its 1 MiB of optimizer constants and the static 4-byte loss "
            "(1,048,580 B) that a 6-step meta run holds too (`oomlab train --device meta --cuda-graphs "
            "--steps 6`; the kit's meta runs take 6 steps since).")
    return ["Each configuration's `oomlab train` flags run again on the meta device in the same call "
            "(`res/meta_<tag>.json`; 2 steps in the kit's records before 6 became its count) beside the CUDA run's peak (`res/oomlab_<tag>.json`). "
            "The meta device replays the tensors' allocations but allocates no workspaces (cuDNN's and "
            "cuBLAS's scratch, sized by the GPU libraries' choices), so a CUDA peak holds whatever "
            "workspace was live at that moment, and the caching allocator, its pool shaped by the "
            "workspaces too, serves some tensors from other (differently rounded) blocks: allocated "
            "bytes differ both ways. The last column compares what the live tensors requested at the "
            "end of both runs (`requested_bytes.all.current`, no rounding; 0 = equal to the byte); "
            "the CUDA model tests (below) compare whole traces apart from workspaces.\n",
            md_table(["config", "tag", "meta peak B", "cuda peak B", "meta / cuda", "requested at end, meta - cuda B"],
                     rows, right={2, 3, 4, 5}),
            f"Peaks equal to the byte: {equal} of {len(rows)}; within 1%: {within} of {len(rows)}. "
            f"Requested bytes at the end equal to the byte: {req_equal} of {req_total}.{note}\n"]


def rounds_part(rec):
    """The record's repeated pairs (points.json "repeated": per-round medians, the paired
    ratio's 95% interval, issue 31's bar and its verdict); [] when the run repeated nothing."""
    try:
        pts = json.loads((rec.folder / "points.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    rows = []
    for tag, p in sorted(pts.items()) if isinstance(pts, dict) else []:
        r = p.get("repeated") if isinstance(p, dict) else None
        i = r.get("ratio") if isinstance(r, dict) else None
        if not isinstance(i, dict) or not isinstance(i.get("estimate"), (int, float)):
            continue
        rows.append([tag, str(r.get("twin", MISSING)), str(i.get("n", MISSING)), f"{i['estimate']:.3f}",
                     f"{i.get('lo', 0):.3f}-{i.get('hi', 0):.3f}" + ("" if i.get("enough") else " (range)"),
                     f"{r['bar']:.2f}" if isinstance(r.get("bar"), (int, float)) else "—", str(r.get("verdict", "—"))])
    if not rows:
        return []
    return ["#### Repeated pairs (OOMLAB_KIT_REPEAT)\n",
            "oomlab and PyTorch alternating, round after round, in one call: the ratio oomlab / PyTorch is the "
            "geometric mean of the per-round ratios with a 95% Student-t interval (the report's verdict rule); "
            "a bar of issue 31 is met when the whole interval is below it.\n",
            md_table(["config", "PyTorch twin", "pairs", "ratio", "95% interval", "bar", "verdict"], rows,
                     right={2, 3, 4, 5})]
