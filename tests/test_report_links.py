"""test_report_links.py — REPORT.md cites only files of the repository.

make_report.py regenerates the report from the committed results into a temporary folder; then
every relative link in it ([text](target), ![figure](target)) must exist, resolved from the
folder the committed report lives in, reports/ (a figure may exist in the fresh output only),
and every file it names as a path must exist:
  * a path under a top-level folder of the repository (reports/..., experiments/...,
    scripts/..., docs/..., tests/..., kernels/..., engine/..., models/...), in a code span
    or in prose: that path, less a trailing '/', ':' or '.';
  * a bare file name with a documentation or source suffix (.md, .py, .h, .cpp, .cu, .sh,
    .json, .jsonl, .tar.gz), such as "SOURCE_TABLES.md": some tracked file of that name.
Exempt: URLs (scheme://), in-page anchors (#...), and paths holding a placeholder or a wildcard
(NN, NAME, *, ?, <, {), which name a pattern, not a file. check_links(text, out_dir) returns the
problems, so that a planted report can be checked too.
Run: python3 -m unittest tests/test_report_links.py
"""
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from tests.report_test_util import run_make_report

ROOT = Path(__file__).resolve().parent.parent
TOP = ("reports", "experiments", "scripts", "docs", "tests", "kernels", "engine", "models")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
TOP_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./*?<>{}-]*)")
BARE = re.compile(r"(?<![\w./-])([\w-]+(?:\.[\w-]+)*\.(?:md|py|h|cpp|cu|sh|json|jsonl|tar\.gz))(?![\w/-])")
PLACEHOLDER = re.compile(r"[*?<>{}]|\bNN\b|NN_|\bNAME\b")


def tracked_names():
    out = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT).stdout
    return {Path(p).name for p in out.splitlines()} | {p.name for p in (ROOT / "docs").glob("*")}


def check_links(text, out_dir, names=None):
    """[problem] for every broken link and every named path that is not a file here."""
    names = tracked_names() if names is None else names
    problems = []
    for target in LINK.findall(text):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path = target.split("#")[0]
        if not ((ROOT / "reports" / path).exists() or (Path(out_dir) / path).exists()):
            problems.append(f"link to {target}: no such file")
    prose = LINK.sub(lambda m: m.group(0).split("](")[0], text)   # link targets checked above
    prose = re.sub(r"https?://\S+", "", prose)
    for path in TOP_PATH.findall(prose):
        path = path.rstrip(".:/")
        if not PLACEHOLDER.search(path) and not (ROOT / path).exists():
            problems.append(f"names {path}: no such path")
    for name in BARE.findall(prose):
        if not PLACEHOLDER.search(name) and name not in names:
            problems.append(f"names {name}: no such file in the repository")
    return sorted(set(problems))


class ReportLinks(unittest.TestCase):
    def test_every_link_and_named_path_exists(self):
        with tempfile.TemporaryDirectory() as out:
            r = run_make_report("--out", out)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            text = (Path(out) / "REPORT.md").read_text(encoding="utf-8")
            self.assertEqual(check_links(text, out), [])
        self.assertIn("](../docs/SOURCE_TABLES.md)", text)
        self.assertIn("](../docs/VERDICTS.md)", text)
        self.assertNotIn("DESIGN.md", text)

    def test_a_planted_report_with_broken_links_fails(self):
        text = ("See [the rule](../docs/VERDICTS.md), [gone](../docs/GONE.md), ![fig](figures/none.png), "
                "[web](https://example.org/x.md), `experiments/NN_name/README.md`, reports/results/gpu/, "
                "`scripts/no_such.py`, DESIGN.md section 11 and SOURCE_TABLES.md T3.")
        with tempfile.TemporaryDirectory() as out:
            problems = check_links(text, out, names={"SOURCE_TABLES.md"})
        self.assertEqual(problems, ["link to ../docs/GONE.md: no such file", "link to figures/none.png: no such file",
                                    "names DESIGN.md: no such file in the repository",
                                    "names scripts/no_such.py: no such path"])

    def test_old_citations_become_links(self):
        sys.path.insert(0, str(ROOT / "scripts"))
        from oomlab_report.fmt import cite_links
        self.assertEqual(cite_links("The source's AMP table (oomlab SOURCE_TABLES.md T3); DESIGN.md section 11."),
                         "The source's AMP table ([SOURCE_TABLES.md](../docs/SOURCE_TABLES.md) T3); "
                         "[the verdict rule](../docs/VERDICTS.md).")
        once = cite_links("(SOURCE_TABLES.md)")
        self.assertEqual(cite_links(once), once)   # a link is not rewritten again


if __name__ == "__main__":
    unittest.main()
