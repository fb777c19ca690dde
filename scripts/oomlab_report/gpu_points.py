"""gpu_points.py — an experiment's GPU points from the GPU kit's records, for the renderers of
experiments whose claim is a GPU one (15, 17, 18): the step times of a few gpu_run.sh tags,
all from one call, beside the experiment's own CPU / meta measurements.

one_call(tags, gpu_dir) -> (record name, "GPU, the kit at `commit`, run <start>", {tag: point}) from
the newest kit record (reports/results/gpu/<record>/points.json, written by scripts/gpu_report.py;
newest by the run's start, gpu_order.newest_first, the report's one ordering of records) whose
points.json holds every tag, or None. A point is
points.json's entry: {"oomlab": {median_ms, peak_allocated, ...} or null, "torch": {...} or
null}. ms(point, side) -> the median in ms or None.
gpu_table(tags_rows, gpu_dir) -> the markdown of a small table and its provenance line, or ""
when no record holds the rows' tags. Timings of one call are one median per configuration:
the line says so (inconclusive under the verdict rule, docs/VERDICTS.md) and links the record's
README.md; the experiment's verdict is its
driver's and does not read these. Contract: never raises on a missing or broken record (it is
skipped). Standard library only.
"""
import json
from pathlib import Path

from oomlab_report.fmt import md_table, repo_link
from oomlab_report.gpu_order import newest_first, run_started
from oomlab_report.gpu_section import f_ratio
from oomlab_report.results import REPO_ROOT

GPU_DIR = REPO_ROOT / "reports" / "results" / "gpu"


def _read(path):
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _records(gpu_dir):
    """(name, where it ran, points) of every readable kit record, newest run first."""
    out = []
    for folder in newest_first(Path(gpu_dir).glob("*/")) if Path(gpu_dir).is_dir() else []:
        points, prov = _read(folder / "points.json"), _read(folder / "provenance.json") or {}
        if points is None:
            continue
        where = (f"{(prov.get('machine') or {}).get('gpu') or 'a GPU'}, the kit at "
                 f"`{str(prov.get('commit') or '?')[:12]}`, run {run_started(folder).shown}")
        out.append((folder.name, where, points))
    return out


def _readme_link(gpu_dir, name):
    """The record's README.md as REPORT.md links it (relative to reports/ inside the repository)."""
    path = Path(gpu_dir).resolve() / name / "README.md"
    try:
        return repo_link(path.relative_to(REPO_ROOT).as_posix())
    except ValueError:
        return path.as_posix()


def one_call(tags, gpu_dir=GPU_DIR):
    for name, where, points in _records(gpu_dir):
        if all(isinstance(points.get(t), dict) for t in tags):
            return name, where, {t: points[t] for t in tags}
    return None


def ms(point, side):
    v = ((point or {}).get(side) or {}).get("median_ms")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _f(v, digits=1):   # "—": PyTorch ran none (gpu_section's f_ms says "missing", for a lost file)
    return "—" if v is None else f"{v:.{digits}f}"


def peak_gb(point, side):
    v = ((point or {}).get(side) or {}).get("peak_allocated")
    return v / 1e9 if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def gpu_table(rows, gpu_dir=GPU_DIR, base="default", other="switched", peaks=False):
    """rows: [(label, base tag, other tag[, PyTorch's base tag, PyTorch's other tag])]: per row
    oomlab's two medians and their ratio, and PyTorch's medians of its twins (by default the same
    tags) where it ran them; with peaks, the allocated peaks (GB = 10^9 B) too."""
    rows = [tuple(r) if len(r) == 5 else (*r, r[1], r[2]) for r in rows]
    tags = sorted({t for r in rows for t in r[1:]})
    found = one_call(tags, gpu_dir)
    if not found:
        return ""
    name, where, pts = found
    table = []
    for label, a, b, ta, tb in rows:
        oa, ob, pa, pb = ms(pts[a], "oomlab"), ms(pts[b], "oomlab"), ms(pts[ta], "torch"), ms(pts[tb], "torch")
        row = [label, _f(oa), _f(ob), f_ratio(ob, oa), _f(pa), _f(pb), f_ratio(pb, pa)]
        if peaks:
            ga, gb, qa, qb = (peak_gb(pts[a], "oomlab"), peak_gb(pts[b], "oomlab"), peak_gb(pts[ta], "torch"),
                              peak_gb(pts[tb], "torch"))
            row += [_f(ga, 3), _f(gb, 3), f_ratio(gb, ga, 3), _f(qa, 3), _f(qb, 3), f_ratio(qb, qa, 3)]
        table.append(row)
    head = ["configuration", f"oomlab {base} ms", f"oomlab {other} ms", f"oomlab {other} / {base}",
            f"PyTorch {base} ms", f"PyTorch {other} ms", f"PyTorch {other} / {base}"]
    if peaks:
        head += [f"oomlab {base} peak GB", f"oomlab {other} peak GB", "oomlab peak ratio",
                 f"PyTorch {base} peak GB", f"PyTorch {other} peak GB", "PyTorch peak ratio"]
    note = (f"\nGPU record [`{name}`]({_readme_link(gpu_dir, name)}) ({where}): one call, one median per "
            f"configuration, so each time ratio is a single pair: inconclusive under [the verdict rule]"
            f"({repo_link('docs/VERDICTS.md')}); peaks are deterministic. The verdict below is the driver's and "
            "reads none of these.\n")
    return md_table(head, table, right=set(range(1, len(head)))) + "\n" + note

