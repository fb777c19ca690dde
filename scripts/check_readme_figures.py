#!/usr/bin/env python3
"""check_readme_figures.py — a measured figure stated by hand must be in its results file.

What is checked: each experiments/NN_name/README.md, all of its prose against
reports/results/NN_name.json; reports/benchmarks/README.md, all of its prose against every
JSON file beside it (the benchmark records it describes); and README.md and docs/*.md, where
each sentence (or semicolon clause) that names exactly one experiment (NN_name, `NN` or
"experiment NN") is checked against that experiment's results. A figure that is not there
fails (exit 1; one line per figure: file, line, figure). A README whose experiment has no
results file is not checked. Prose only: HTML
comments, code blocks and spans (flags, formulas, paths), link targets and URLs are skipped.

A figure is
  * a number with a decimal point (0.77, 73.78), whatever follows it;
  * a number with a unit: a percentage (36%, +1.9 points), a ratio written on the number
    (1.08x, 2.2×), a size (B; KB, MB, GB = 10^3, 10^6, 10^9 B; KiB, MiB, GiB = 2^10, 2^20,
    2^30 B), a time (ms, s, min, h).
The end of a range or the error of a mean lends its unit to the number before it
("8-35%", "0.98-1.024x", "73.78 ± 0.59%").
Exempt, as not measurements: integers without one of those units (batch 128, 3 seeds, 512
tokens) and integer ratios and point counts (2-10x and 4x: bars and recipe factors; "11
points" of a matrix); "95% CI" (the rule's level); numbers that are part of a name or a
dimension (ResNet-50, bf16, T9.7, V100, 3x224x224, 16x2, a commit 86c8535); versions (2.15.0,
PyTorch 2.11); dates; scientific notation (1e-5: tolerances); numbers after "sec.", "eq.",
"section", "§" or "issue". The source's figures are measurements too: they match because the
results' `source` block holds them.

Where a figure is looked for: every number of the results file (points, summary, verdict,
source, config, context), the numbers inside its strings included, except per-step series
(lists of more than SERIES numbers, e.g. loss histories: no README quotes one step's value,
and their thousands of values would match almost any figure).
A figure printed with d decimals matches a number that rounds to it at d decimals (absolute
values: a sign convention is not a figure), in the figure's unit or after its unit's scaling:
  %, points    the number itself, or x100 (a fraction); a signed percentage (+36%, -64%) also
               (number - 1) x100 (a ratio written as a change);
  x, no unit   the number itself;
  sizes        the number itself (already in that unit), or bytes / the unit;
  times        the number itself, or from seconds (ms: x1000, min: /60, h: /3600), or from
               milliseconds (s: /1000).
So "0.77x" needs a number in [0.765, 0.775) and "542 MiB" one within 541.5-542.5 MiB: the
issue's examples (08's split 0.77x where the results say 2.88x; 12's 3-seed table beside a
5-seed result; a 93.48% for 03 whose results say 93.55%) fail. Coarse figures are checked
coarsely: an integer percentage matches any number within half a percent, which a large
results file often holds; prefer pointing to REPORT.md's section, rendered from the results,
over restating figures.
Usage: check_readme_figures.py [--experiments DIR] [--results DIR] [--benchmarks DIR] [FILE ...]
  (FILE: files to check, an experiment's README.md checked as its own, the benchmarks folder's
  against its JSON files; default: every experiment's README.md, the benchmarks README.md,
  README.md and docs/*.md)
Standard library only.
"""
import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERIES = 16
UNITS = {   # unit (lower case) -> (kind, scale to the base of its kind: bytes, seconds)
    "%": ("pct", 1), "points": ("pct", 1), "point": ("pct", 1), "x": ("ratio", 1), "×": ("ratio", 1),
    "b": ("size", 1), "kb": ("size", 1e3), "mb": ("size", 1e6), "gb": ("size", 1e9),
    "kib": ("size", 2**10), "mib": ("size", 2**20), "gib": ("size", 2**30),
    "ms": ("time", 1e-3), "s": ("time", 1), "sec": ("time", 1), "seconds": ("time", 1), "second": ("time", 1),
    "min": ("time", 60), "mins": ("time", 60), "minute": ("time", 60), "minutes": ("time", 60),
    "h": ("time", 3600), "hour": ("time", 3600), "hours": ("time", 3600),
}
FIGURE = re.compile(
    r"(?P<sign>[-+−]\s?)?(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
    r"(?:(?P<ratio>[x×])(?!\w|\.\w)|\s?(?P<unit>%|points?\b|[KMG]i?B\b|B\b|ms\b|s\b|sec\b|seconds?\b|mins?\b|"
    r"minutes?\b|h\b|hours?\b))?")
NAMED_BEFORE = re.compile(r"(?:sec\.|eq\.|section|§|issue|PyTorch|Python|CUDA|cuDNN|NCCL|torch|torchvision|"
                          r"version|nvcc|GCC|gcc|OpenBLAS)\s*$", re.I)
CONFIDENCE = re.compile(r"\s*(?:\(|t\s)?\s*(?:CI|interval|confidence|Student)")
LENDERS = re.compile(r"^\s?(?:-|–|—|to|±|/)\s?$")
NUMBER_IN_TEXT = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


# ---- the README's prose -----------------------------------------------------------------------

def _blank(m):
    return re.sub(r"[^\n]", " ", m.group(0))   # keeps every offset and line number


def prose(text):
    """`text` with everything that is not prose blanked out (same length, same lines): HTML
    comments, fenced and indented code blocks, code spans (over line ends too), link targets,
    URLs."""
    text = re.sub(r"<!--.*?-->", _blank, text, flags=re.S)
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```[^\n]*$", _blank, text, flags=re.S | re.M)
    text = re.sub(r"(?<!`)`(?!`)(?:[^`\n]|\n(?!\s*\n))+`", _blank, text)
    text = re.sub(r"(?m)^    (?![ \t]*[-*|]).*$", _blank, text)   # indented code, not a list's lines
    text = re.sub(r"(?<=\])\([^)\s]*\)", _blank, text)
    return re.sub(r"<?https?://[^\s)>]+>?", _blank, text)


def figures(line):
    """[(text, value, decimals, kind or None, scale, offset)] of a text's figures (see the header)."""
    found = []
    for m in FIGURE.finditer(line):
        start, end, num = m.start("num"), m.end(), m.group("num")
        before, after = line[:start], line[end:]
        if re.search(r"[A-Za-z_]$|[A-Za-z]-$|\d[-.]?$", before[:-1] if m.group("sign") else before):
            continue   # part of a name (ResNet-50, bf16, T9.7) or of a longer number
        if re.match(r"[A-Za-z_\d]|\.\d|[eE][-+]?\d|[x×]\d|-\d{2}-\d{2}", after) and not m.group("ratio"):
            continue   # 3x224, 86c8535, 2.15.0, 1e-5, 2026-11-27
        if re.match(r"\d{4}-\d{2}-\d{2}", line[start:start + 10]) or NAMED_BEFORE.search(before):
            continue
        unit = "x" if m.group("ratio") else (m.group("unit") or "").lower()
        kind, scale = UNITS.get(unit, (None, 1))
        dec = len(num.split(".")[1]) if "." in num else 0
        if kind == "pct" and CONFIDENCE.match(after):
            continue   # "95% CI": the rule's level, not a measurement
        if dec == 0 and (kind in (None, "ratio") or unit.startswith("point") and not m.group("sign")):
            kind = "integer"   # exempt ("11 points" of a matrix) unless a range or error lends a unit
        elif kind == "pct" and m.group("sign"):
            kind = "change"
        found.append([m.group(0).strip(), float(num.replace(",", "")), dec, kind, scale, start, end])
    for a, b in zip(found, found[1:]):   # "8-35%", "0.98-1.024x", "73.78 ± 0.59%": the unit is lent
        if a[3] in (None, "integer") and b[3] not in (None, "integer") and LENDERS.match(line[a[6]:b[5]]):
            if not (a[2] == 0 and b[3] == "ratio"):
                a[3], a[4] = b[3], b[4]
    return [tuple(f[:6]) for f in found if f[3] != "integer"]


# ---- the results --------------------------------------------------------------------------------

def result_numbers(doc):
    """Every number of a results document, the numbers in its strings included, except those of
    per-step series (lists of more than SERIES numbers)."""
    out = []

    def walk(x):
        if isinstance(x, bool) or x is None:
            return
        if isinstance(x, (int, float)):
            out.append(float(x))
        elif isinstance(x, str):
            out.extend(float(t) for t in NUMBER_IN_TEXT.findall(x.replace(",", "")))
        elif isinstance(x, list):
            if sum(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x) > SERIES:
                return
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
    walk(doc)
    return sorted({abs(n) for n in out})


def candidates(n, kind, scale):
    if kind == "pct":
        return (n, 100 * n)
    if kind == "change":   # a signed percentage: also a ratio written as a change
        return (n, 100 * n, abs(100 * (n - 1)))
    if kind == "size":
        return (n, n / scale)
    if kind == "time":
        return (n, n / scale, n * 1e-3 / scale)   # n in the unit, in seconds, in milliseconds
    return (n,)


def matches(value, dec, kind, scale, numbers):
    tol = 0.5 * 10 ** -dec * (1 + 1e-9) + 1e-12
    v = abs(value)
    return any(abs(c - v) <= tol for n in numbers for c in candidates(n, kind, scale))


def folder_numbers(folder):
    """The numbers of every JSON file in `folder` (None when it holds none that parses)."""
    numbers = set()
    for f in sorted(folder.glob("*.json")):
        try:
            numbers.update(result_numbers(json.loads(f.read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    return sorted(numbers) or None


# ---- the check ----------------------------------------------------------------------------------

BENCHMARKS = "benchmarks"   # the `own` key of the benchmarks README: checked against its folder

EXPERIMENT = re.compile(r"\b(\d{2})_[a-z][a-z0-9_]*\b|`(\d{2})`|\b[Ee]xperiments? (\d{2})\b")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\[*])|(?<=;)\s+|\n\s*\n")


def units(text, own):
    """[(start, end, experiment number or None)]: the whole text for an experiment's own README;
    else its sentences and semicolon clauses, each attributed to the one experiment it names
    (NN_name, `NN`, "experiment NN"), or to none when it names none or several."""
    if own:
        return [(0, len(text), own)]
    bounds = [0] + [m.end() for m in SENTENCE_END.finditer(text)] + [len(text)]
    out = []
    for start, end in zip(bounds, bounds[1:]):
        named = {next(g for g in m.groups() if g) for m in EXPERIMENT.finditer(text[start:end])}
        out.append((start, end, named.pop() if len(named) == 1 else None))
    return out


def check_text(text, numbers_of, own=None):
    """[(line, figure)] of the figures of `text` its experiment's results do not hold.
    numbers_of(NN) gives experiment NN's numbers (None: no results, not checked); `own` is
    the number of the experiment whose README `text` is, else each sentence naming exactly one
    experiment is checked against that one's results."""
    clean, bad = prose(text), []
    for start, end, nn in units(text, own):
        numbers = numbers_of(nn) if nn else None
        if numbers is None:
            continue
        for fig, value, dec, kind, scale, at in figures(clean[start:end].replace("\n", " ")):
            if not matches(value, dec, kind, scale, numbers):
                bad.append((text.count("\n", 0, start + at) + 1, fig))
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", default=str(ROOT / "experiments"))
    ap.add_argument("--results", default=str(ROOT / "reports" / "results"))
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--benchmarks", default=str(ROOT / "reports" / "benchmarks"))
    args = ap.parse_args(argv)
    exps, results, benchmarks = Path(args.experiments), Path(args.results), Path(args.benchmarks)
    folders = {d.name[:2]: d.name for d in sorted(exps.glob("[0-9][0-9]_*")) if d.is_dir()}
    cache = {}

    def numbers_of(nn):
        if nn == BENCHMARKS and nn not in cache:
            cache[nn] = folder_numbers(benchmarks)
        if nn not in cache:
            try:
                doc = json.loads((results / f"{folders[nn]}.json").read_text(encoding="utf-8"))
                cache[nn] = result_numbers(doc)
            except (KeyError, OSError, ValueError):
                cache[nn] = None
        return cache[nn]

    files = args.files or (sorted(exps.glob("[0-9][0-9]_*/README.md")) + [benchmarks / "README.md"] +
                           [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")))
    failed = checked = 0
    for f in files:
        own = f.parent.name[:2] if f.parent.resolve().parent == exps.resolve() else None
        if f.parent.resolve() == benchmarks.resolve():
            own = BENCHMARKS
        if own is not None and numbers_of(own) is None:
            print(f"check_readme_figures: note: {f}: no results for {f.parent.name}; not checked")
            continue
        bad = check_text(f.read_text(encoding="utf-8"), numbers_of, own)
        checked += 1
        for line, fig in bad:
            where = ("the JSON files beside it" if own == BENCHMARKS else f"results/{folders[own]}.json" if own
                     else "the results of the experiment its sentence names")
            print(f"FAIL {f}:{line}: '{fig}' is in no number of {where}")
        failed += bool(bad)
    print(f"check_readme_figures: {checked - failed}/{checked} files state only figures their results hold")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
