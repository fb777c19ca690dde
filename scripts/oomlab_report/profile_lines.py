"""profile_lines.py — a GPU record's README lines for the experiments' gpu profiles the kit ran
(scripts/gpu_run.sh writes OUT/NN_name.json, or NN_name.partial.json when the budget cut the
run): per experiment its points, the GPU verdict and each claim's measured value and judgement
(the results' summary, experiments/runner/gpu_claims.h), or the points a partial run holds.
lines(folder) -> markdown lines ([] when the record holds none). Never raises on a broken
file (it is named as unreadable). Standard library only: the GPU kit carries it.
"""
import json
from pathlib import Path


def _load(path):
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def lines(folder):
    folder = Path(folder)
    files = sorted(folder.glob("[0-9][0-9]_*.json"))
    if not files:
        return []
    out = ["## The experiments' gpu profiles", "",
           "`oomlab run experiments/NN --profile gpu`, judged by each spec's `gpu_claims` (REPORT.md shows them in "
           "the experiments' sections).", ""]
    for f in files:
        doc = _load(f)
        name = f.name[:-len(".partial.json")] if f.name.endswith(".partial.json") else f.stem
        if doc is None:
            out += [f"- `{f.name}`: unreadable", ""]
            continue
        if f.name.endswith(".partial.json"):
            out += [f"- **{name}**: cut by the budget after {len(doc.get('points', []))} point(s); the next lease "
                    "resumes it", ""]
            continue
        verdict = doc.get("verdict") or {}
        seconds = sum((p.get("outcome") or {}).get("seconds", 0) for p in doc.get("points", []))
        out += [f"### {name}: {verdict.get('status', '?')} ({len(doc.get('points', []))} points, {seconds:.0f} s)", ""]
        for c in (doc.get("summary") or {}).get("claims", []):
            out.append(f"- {c.get('text', '?')}")
        out.append("")
    return out
