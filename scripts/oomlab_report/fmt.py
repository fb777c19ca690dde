"""fmt.py — numbers, markdown tables, links and the generic results section of REPORT.md (an
experiment without a renderer of its own). Writing is atomic.py's.
Links (repo_link) are relative to the folder the committed report lives in, reports/, wherever
it is written (--out): the text does not depend on where it lands. cite_links rewrites the
citations of documents that were the project's planning material (committed results and specs
still say "oomlab SOURCE_TABLES.md T3", "DESIGN.md section 11") into links to their repository
versions, docs/SOURCE_TABLES.md and docs/VERDICTS.md: the report cites only files it holds."""
import json
import os
import re
from pathlib import Path

from oomlab_report.results import is_num


# ---- formatting --------------------------------------------------------------------------

def fmt_bytes(b):
    """Bytes in B/KiB/MiB/GiB (binary units, as PyTorch's memory tooling prints them)."""
    if not is_num(b):
        return "—"
    sign, b = ("-" if b < 0 else ""), abs(b)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            v = b / scale
            return f"{sign}{v:.2f} {unit}" if v < 100 else f"{sign}{v:.1f} {unit}"
    return f"{sign}{b:.0f} B"


def fmt_count(n):
    if not is_num(n):
        return "—"
    return f"{n:,.0f}" if float(n).is_integer() or abs(n) >= 1000 else f"{n:.4g}"


def fmt_num(x, key=""):
    """Format a metric value; byte-valued keys (…bytes…) in MiB/GiB."""
    if isinstance(x, bool) or x is None:
        return str(x).lower() if isinstance(x, bool) else "—"
    if is_num(x):
        if "bytes" in key:
            return fmt_bytes(x)
        if isinstance(x, int) or (abs(x) >= 1000 and float(x).is_integer()):
            return f"{x:,}" if isinstance(x, int) else f"{x:,.0f}"
        return f"{x:.4g}"
    if isinstance(x, str):
        return x
    text = json.dumps(x)
    return text if len(text) <= 60 else text[:57] + "..."


def fmt_ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}×" if is_num(a) and is_num(b) and b else "—"


def ratio_interval_text(ci, sign="x"):
    """The verdict rule's paired ratio as a summary holds it (interval_json): "1.23x (95% CI
    1.10-1.37, 5 pairs)", the observed range when too few pairs for the rule, "n/a" without one."""
    if not is_num(ci.get("estimate")):
        return "n/a"
    n = ci.get("n", 0)
    if not is_num(ci.get("lo")) or not is_num(ci.get("hi")) or n < 2:
        return f"{ci['estimate']:.2f}{sign} ({n} pair{'s' if n != 1 else ''}: no interval)"
    what = "95% CI" if ci.get("enough") else "range"
    return f"{ci['estimate']:.2f}{sign} ({what} {ci['lo']:.2f}-{ci['hi']:.2f}, {n} pairs)"


def cell(x):
    return str(x).replace("|", "\\|").replace("\n", "<br>")


def md_table(headers, rows, right=None):
    """Markdown table; `right` = indices of right-aligned (numeric) columns."""
    right = set(range(1, len(headers)) if right is None else right)
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---:" if i in right else ":---" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


REPORT_DIR = "reports"   # where the committed REPORT.md lives, relative to the repository


def repo_link(path):
    """The link from REPORT.md to `path`: a path relative to the repository becomes relative to
    reports/ (docs/X.md -> ../docs/X.md); an absolute one (results outside the repository) stays."""
    p = str(path)
    return p if Path(p).is_absolute() else os.path.relpath(p, REPORT_DIR).replace(os.sep, "/")


CITATIONS = (   # (the old citation, the repository's document, the link's text)
    (re.compile(r"(?:oomlab )?(?<![\w/.\[`-])SOURCE_TABLES\.md(?![\w`\]])"), "docs/SOURCE_TABLES.md", "SOURCE_TABLES.md"),
    (re.compile(r"DESIGN\.md (?:section |§ ?)11"), "docs/VERDICTS.md", "the verdict rule"),
)


def cite_links(text):
    """text with every old citation of CITATIONS a markdown link to the document now in docs/."""
    for pattern, path, shown in CITATIONS:
        text = pattern.sub(f"[{shown}]({repo_link(path)})", text)
    return text


def details(summary, body):
    return f"<details><summary>{summary}</summary>\n\n{body}\n</details>\n"


# ---- generic pieces ---------------------------------------------------------------------

def scalar_items(d):
    return [(k, v) for k, v in d.items() if not isinstance(v, (dict, list))]


def render_mapping(d, depth=0):
    """Best-effort markdown for an arbitrary source/summary object."""
    out = []
    for key, value in d.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            cols = list(dict.fromkeys(k for v in value for k in v))
            rows = [[fmt_num(v.get(c), c) for c in cols] for v in value]
            out.append(f"\n**{key}**\n\n" + md_table(cols, rows, right=set()))
        elif isinstance(value, list):
            out.append(f"- **{key}**: " + ", ".join(fmt_num(v, key) for v in value))
        elif isinstance(value, dict) and len(value) > 12:  # e.g. a full memory-stats block
            rows = [[k, fmt_num(v, k if "bytes" in k else key)] for k, v in value.items()]
            out.append("\n" + details(f"{key} ({len(value)} entries)",
                                       md_table(["key", "value"], rows)))
        elif isinstance(value, dict) and depth < 2:
            out.append(f"- **{key}**:\n" + "\n".join("  " + line for line in
                                                      render_mapping(value, depth + 1).splitlines()))
        else:
            out.append(f"- **{key}**: {fmt_num(value, key)}")
    return "\n".join(out) + "\n"


def _flat_metrics(metrics):
    """Scalar metrics, one level of nested objects flattened as parent.key."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items() if not isinstance(vv, (dict, list))})
        elif not isinstance(v, list):
            out[k] = v
    return out


def points_table(doc):
    """One row per matrix point: outcome, seconds, scalar metrics, memory totals (schema 2)."""
    points = doc["points"]
    flat = [_flat_metrics(p["metrics"]) for p in points]
    metric_cols = list(dict.fromkeys(k for f in flat for k in f))
    totals = [p["memory"].get("totals", {}) for p in points]
    mem_cols = [k for k in ("allocated_bytes.all.peak", "reserved_bytes.all.peak")
                if any(k in t for t in totals)]
    rows = [[p["name"], p["outcome"]["status"], f"{p['outcome'].get('seconds', 0):.1f}"] +
            [fmt_num(f.get(c), c) for c in metric_cols] + [fmt_bytes(t.get(c)) for c in mem_cols]
            for p, f, t in zip(points, flat, totals)]
    return md_table(["point", "outcome", "s"] + metric_cols + mem_cols, rows)


def render_generic(doc, out_dir):
    parts = ["### Source\n\n" + render_mapping(doc["source"]) if doc["source"] else
             "### Source\n\n_No source figures recorded._\n"]
    parts.append("### Ours\n")
    if doc["summary"]:
        parts.append(render_mapping(doc["summary"]))
    parts.append(points_table(doc) if doc["points"] else "_No points._\n")
    return "\n".join(parts), []


