"""gpu_figure.py — the figure of an experiment's GPU claims, drawn beside its CPU / meta figures
whenever a GPU record holds its gpu profile (gpu_results.newest): figures/NN_name_gpu.png, one
row per claim of the result's summary (experiments/runner/gpu_claims.h), nothing else read.

Each row: the measured estimate as a point and its interval (lo-hi, the verdict rule's: the
paired ratio's 95% CI over alternating pairs for a timing ratio) as a horizontal bar; an exact
value (a peak, a count: n == 1 or lo == hi) is a point alone. The claimed bound is a vertical
tick across the row ("below X" / "above X", the claimed side shaded lightly) or a band
("within [a, b]"). Colour and marker say how the claim was judged: holds, fails, inside the
noise, too few runs, pending GPU. Rows are grouped by unit, one panel each (a ratio "x", ms,
GiB, or a plain number); a ratio panel has a log axis (a non-positive value: linear). The unit
comes from the claim's own text, which the C++ writes as "NAME: VALUE[x| ms| GiB] (...)"; the
summary's numbers are in seconds / bytes and are scaled to the unit shown.

figure_path(name) -> "figures/NN_name_gpu.png" (relative to the report's folder).
draw(name, gpu, out_dir, spec_claims=()) -> that path, after writing the PNG (gpu: a
gpu_results.GpuResult; spec_claims: the spec's gpu_claims, read only for the unit of a claim
without a value, whose text states none).
Contract: a claim without a value (n == 0) is drawn as a label at its bound; matplotlib is
imported by draw() only, so importing this module needs none (gpu_results stays standard
library, and make_report's fallback to a python with matplotlib still runs first).
"""
import math
import re
import textwrap

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.gpu_results import measured

# judged -> (colour, marker), in legend order (verdict_rule.cpp's judged_name).
STYLE = {"holds": ("#2a9d4b", "o"), "fails": ("#d62728", "X"), "inside the noise": ("#e69f00", "s"),
         "too few runs": ("#7f7f7f", "v"), "pending GPU": ("#4C72B0", "D")}
OTHER = ("#7f7f7f", "o")
# unit in the claim's text -> (axis label, factor from the summary's number)
UNITS = {"x": ("ratio (log scale)", 1.0), " ms": ("ms", 1e3), " GiB": ("GiB", 1.0 / 2**30), "": ("value", 1.0)}
VALUE = re.compile(r"^-?\d+(?:\.\d+)?(x| ms| GiB|)(?: \(|$)")
BOUND = re.compile(r"^(below|above) (-?[\d.eE+-]+)$|^within \[(-?[\d.eE+-]+), (-?[\d.eE+-]+)\]$")


def figure_path(name):
    return f"figures/{name}_gpu.png"


def unit_of(claim, spec_claims=()):
    """The unit the claim's text states; for a claim without a value (its text states none), a
    ratio when the spec's claim of that name has a base, else the metric's own unit."""
    m = VALUE.match(measured(claim))
    if m:
        return m.group(1)
    spec = next((s for s in spec_claims if isinstance(s, dict) and s.get("name") == claim.get("name")), {})
    metric = str(claim.get("metric", ""))
    if "base" in spec:
        return "x"
    return " ms" if metric == "step_time" else " GiB" if metric.startswith("peak") else ""


RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.5, 2.0,
               2.5, 3.0, 4.0, 5.0, 10.0, 20.0, 50.0, 100.0)


def _ratio_axis(ax, x0, x1):
    """Ticks a reader can read on a log ratio axis: 0.5x, 0.8x, 1x, 1.2x ..."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    ticks = [t for t in RATIO_TICKS if x0 <= t <= x1]
    while len(ticks) > 9:
        ticks = [t for i, t in enumerate(ticks) if i % 2 == 0 or t == 1.0]
    ax.xaxis.set_major_locator(FixedLocator(ticks or [1.0]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_locator(NullLocator())


def bound_of(claim):
    """("below" | "above", x) or ("within", (a, b)) from the claim's bound text, or None."""
    m = BOUND.match(str(claim.get("bound", "")).strip())
    if not m:
        return None
    try:
        return (m.group(1), float(m.group(2))) if m.group(1) else ("within", (float(m.group(3)), float(m.group(4))))
    except ValueError:
        return None


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _row(claim, factor):
    """(estimate, lo, hi) scaled, or None when the claim has no value."""
    if not claim.get("n") or not _num(claim.get("estimate")):
        return None
    est = claim["estimate"] * factor
    lo = claim["lo"] * factor if _num(claim.get("lo")) else est
    hi = claim["hi"] * factor if _num(claim.get("hi")) else est
    return est, min(lo, est), max(hi, est)


def _bound_values(bound, factor):
    if bound is None:
        return []
    return [v * factor for v in (bound[1] if bound[0] == "within" else (bound[1],))]


def _panel(ax, claims, unit):
    label, factor = UNITS[unit]
    rows = [(c, _row(c, factor), bound_of(c)) for c in claims]
    values = [v for _, r, b in rows for v in (list(r) if r else []) + _bound_values(b, factor)]
    log = unit == "x" and values and min(values) > 0
    if unit == "x" and not log:
        label = "ratio"
    if log:
        ax.set_xscale("log")
    lo_all, hi_all = (min(values), max(values)) if values else (0.0, 1.0)
    if log:
        pad = max((math.log10(hi_all) - math.log10(lo_all)) * 0.15, 0.02)
        x0, x1 = 10 ** (math.log10(lo_all) - pad), 10 ** (math.log10(hi_all) + pad)
    else:
        pad = max((hi_all - lo_all) * 0.15, abs(hi_all) * 0.05, 0.5)
        x0, x1 = lo_all - pad, hi_all + pad
    ax.set_xlim(x0, x1)
    if log:
        _ratio_axis(ax, x0, x1)
    n = len(rows)
    for i, (c, r, b) in enumerate(rows):
        y = n - 1 - i
        colour, marker = STYLE.get(c.get("judged"), OTHER)
        if b and b[0] == "within":
            ax.fill_betweenx([y - 0.38, y + 0.38], b[1][0] * factor, b[1][1] * factor, color="#999999",
                             alpha=0.25, lw=0)
            for v in b[1]:
                ax.plot([v * factor] * 2, [y - 0.38, y + 0.38], color="#555555", lw=1.2)
        elif b:
            x = b[1] * factor
            ax.fill_betweenx([y - 0.38, y + 0.38], *((x0, x) if b[0] == "below" else (x, x1)),
                             color="#999999", alpha=0.12, lw=0)
            ax.plot([x, x], [y - 0.38, y + 0.38], color="#555555", lw=1.6)
        if r is None:
            at = _bound_values(b, factor)
            ax.text(at[0] if at else (x0 + x1) / 2, y, " no value", va="center", fontsize=8, color=colour)
            continue
        est, lo, hi = r
        if hi > lo:
            ax.plot([lo, hi], [y, y], color=colour, lw=3, alpha=0.6, solid_capstyle="butt")
            ax.plot([lo, lo], [y - 0.15, y + 0.15], color=colour, lw=1.2)
            ax.plot([hi, hi], [y - 0.15, y + 0.15], color=colour, lw=1.2)
        ax.plot([est], [y], marker=marker, color=colour, markersize=8 if hi > lo else 9,
                markeredgecolor="black" if hi == lo else colour, linestyle="none", zorder=3)
        ax.annotate(measured(c).split(" (")[0] + ("" if hi > lo else " (exact)"), (hi, y),
                    xytext=(6, 0), textcoords="offset points", va="center", fontsize=7.5, color="#333333")
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_yticks(range(n))
    ax.set_yticklabels([textwrap.fill(str(c.get("name", "")), 58) for c, _, _ in reversed(rows)], fontsize=7.5)
    ax.set_xlabel(label, fontsize=9)
    ax.grid(axis="x", which="both", alpha=0.25)


def _legend(fig, claims):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    seen = [j for j in STYLE if any(c.get("judged") == j for c in claims)]
    handles = [Line2D([], [], color=STYLE[j][0], marker=STYLE[j][1], linestyle="none", label=j) for j in seen]
    bounds = [bound_of(c) for c in claims]
    if any(c.get("n", 0) > 1 and _num(c.get("lo")) and _num(c.get("hi")) and c["hi"] > c["lo"] for c in claims):
        handles.append(Line2D([], [], color=OTHER[0], lw=3, alpha=0.6, label="interval (lo-hi)"))
    if any(b and b[0] != "within" for b in bounds):
        handles.append(Line2D([], [], color="#555555", lw=1.6, label="claimed bound (shaded: the claimed side)"))
    if any(b and b[0] == "within" for b in bounds):
        handles.append(Patch(color="#999999", alpha=0.25, label="claimed range (within)"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    return math.ceil(len(handles) / 4)


def draw(name, gpu, out_dir, spec_claims=()):
    import matplotlib.pyplot as plt   # make_report chose the Agg backend, once
    claims = [c for c in gpu.doc["summary"].get("claims", []) if isinstance(c, dict)]
    groups = {}
    for c in claims:
        groups.setdefault(unit_of(c, spec_claims), []).append(c)
    order = [u for u in UNITS if u in groups] or [""]
    heights = [max(len(groups.get(u, [])), 1) + 1.2 for u in order]
    fig, axes = plt.subplots(len(order), 1, figsize=(11, 1.3 + 0.42 * sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, unit in zip(axes[:, 0], order):
        if groups.get(unit):
            _panel(ax, groups[unit], unit)
        else:
            ax.text(0.5, 0.5, "no GPU claims in the summary", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
    device = next((d.get("physical", d.get("device")) for d in gpu.doc["context"].get("devices", [])
                   if str(d.get("device", "")).startswith("cuda")), gpu.doc["summary"].get("device", "?"))
    fig.suptitle(f"{name}: GPU claims, measured vs claimed ({device}, record {gpu.record}; "
                 f"GPU verdict {gpu.doc['verdict']['status']})", fontsize=10)
    legend_rows = _legend(fig, claims)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, (0.15 + 0.22 * legend_rows) / height, 1, 1 - 0.05 / height))
    path = figure_path(name)
    save_fig_atomic(fig, out_dir / path)
    return path
