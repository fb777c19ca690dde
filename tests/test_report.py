"""test_report.py — the Python side of the results: an experiment is one folder.

PlantedExperiment copies experiments/ to a temporary folder, plants 99_planted there (spec,
README, summary schema and report.py; no driver, so the runner's generic driver summarises
it), runs it with the built oomlab, and sees check_results accept it and make_report render
its section and figure; a summary its schema rejects, or a report.py without render(), is an
error that writes nothing. Schema covers oomlab_report/schema.py's subset; Folders checks
that every committed experiment folder is complete.
Run: python3 -m unittest tests/test_report.py  (OOMLAB_BUILD_DIR: the build with oomlab)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OOMLAB = ROOT / os.environ.get("OOMLAB_BUILD_DIR", "build") / "oomlab"
sys.path.insert(0, str(ROOT / "scripts"))   # a test is not a script of scripts/
from oomlab_report import schema  # noqa: E402


def python_with_matplotlib():
    probe = subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True)
    return sys.executable if probe.returncode == 0 else "/usr/bin/python3"


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=ROOT, timeout=600)


PLANTED_SPEC = {
    "name": "99_planted", "title": "A planted experiment", "claim": "Two batches fit.",
    "device": "meta", "expected_points": 2,
    "matrix": {"command": "estimate", "options": {"model": "resnet20", "input": "1,28,28"},
               "axes": [{"name": "batch", "values": [1, 2]}]},
}
PLANTED_SCHEMA = {"type": "object", "required": ["points", "outcomes"],
                  "properties": {"points": {"type": "integer"}, "outcomes": {"type": "object"}}}
PLANTED_REPORT = '''"""report.py — the planted experiment's section: one figure of its points."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic


def render(doc, out_dir):
    fig, ax = plt.subplots()
    ax.plot([p["axes"]["batch"] for p in doc["points"]], [1, 2])
    save_fig_atomic(fig, out_dir / FIGURES[0])
    return f"planted section: {doc['summary']['points']} points\\n", list(FIGURES)


FIGURES = ["figures/99_planted.png"]
'''


@unittest.skipUnless(OOMLAB.exists(), f"{OOMLAB} not built")
class PlantedExperiment(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        t = Path(cls.tmp.name)
        cls.exps, cls.results, cls.out = t / "experiments", t / "results", t / "report"
        shutil.copytree(ROOT / "experiments", cls.exps)
        folder = cls.exps / "99_planted"
        folder.mkdir()
        (folder / "experiment.json").write_text(json.dumps(PLANTED_SPEC))
        (folder / "README.md").write_text("# 99_planted\n\nPlanted by tests/test_report.py.\n")
        (folder / "summary.schema.json").write_text(json.dumps(PLANTED_SCHEMA))
        (folder / "report.py").write_text(PLANTED_REPORT)
        cls.results.mkdir()
        cls.ran = run(OOMLAB, "run", folder, "--out", cls.results / "99_planted.json")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def make_report(self, results=None):
        return run(python_with_matplotlib(), "scripts/make_report.py", "--experiments", self.exps,
                   "--results", results or self.results, "--out", self.out)

    def test_it_runs_validates_and_renders_with_no_other_edit(self):
        self.assertEqual(self.ran.returncode, 0, self.ran.stdout + self.ran.stderr)
        r = run(sys.executable, "scripts/check_results.py", "--schema-only", "--experiments", self.exps, self.results)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.make_report()
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        text = (self.out / "REPORT.md").read_text()
        self.assertIn("[99_planted](#99_planted) | A planted experiment | meta | quick: 2 points", text)
        self.assertIn("## 99_planted: A planted experiment", text)
        self.assertIn("planted section: 2 points", text)
        self.assertIn("### Verdict: **inconclusive**", text)
        self.assertEqual((self.out / "figures/99_planted.png").read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
        self.assertIn("_No results yet: run `oomlab run experiments/01_vgg16_memory`", text)

    def test_a_summary_its_schema_rejects_is_an_error_and_writes_nothing(self):
        self.assertEqual(self.ran.returncode, 0, self.ran.stderr)
        with tempfile.TemporaryDirectory() as bad:
            doc = json.loads((self.results / "99_planted.json").read_text())
            doc["summary"]["points"] = "two"
            (Path(bad) / "99_planted.json").write_text(json.dumps(doc))
            out_report = self.out / "REPORT.md"
            before = out_report.read_bytes() if out_report.exists() else None
            r = self.make_report(Path(bad))
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("summary.points: expected integer, got str", r.stderr)
            self.assertEqual(out_report.read_bytes() if out_report.exists() else None, before)

    def test_a_report_py_without_render_is_an_error_naming_it(self):
        self.assertEqual(self.ran.returncode, 0, self.ran.stderr)
        report_py = self.exps / "99_planted" / "report.py"
        saved = report_py.read_text()
        try:
            report_py.write_text('FIGURES = []\n')
            r = self.make_report()
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("99_planted/report.py: defines no render(doc, out_dir)", r.stderr)
        finally:
            report_py.write_text(saved)


class Schema(unittest.TestCase):
    def test_types_keys_and_items(self):
        s = {"type": "object", "required": ["rows"], "additionalProperties": False,
             "properties": {"rows": {"type": "array", "items": {"type": ["number", "null"]}}}}
        self.assertEqual(schema.errors({"rows": [1, None, 2.5]}, s), [])
        self.assertEqual(schema.errors({}, s), ["summary: missing key 'rows'"])
        self.assertEqual(schema.errors({"rows": [1, "x"]}, s),
                         ["summary.rows[1]: expected number or null, got str"])
        self.assertEqual(schema.errors({"rows": [], "extra": 1}, s), ["summary: unexpected key 'extra'"])
        self.assertEqual(schema.errors(True, {"type": "integer"}), ["summary: expected integer, got bool"])

    def test_a_typo_in_the_schema_is_an_error_not_a_pass(self):
        self.assertEqual(schema.errors({}, {"typ": "object"}), ["summary: schema has unknown keyword(s) ['typ']"])


class Folders(unittest.TestCase):
    def test_every_committed_experiment_folder_is_complete(self):
        folders = sorted(p.parent for p in (ROOT / "experiments").glob("*/experiment.json"))
        self.assertGreaterEqual(len(folders), 13)
        for folder in folders:
            for name in ("README.md", "driver.cpp", "summary.schema.json", "report.py"):
                self.assertTrue((folder / name).is_file(), f"{folder.name} has no {name}")
            spec = json.loads((folder / "experiment.json").read_text())
            self.assertEqual(spec["name"], folder.name)
            self.assertIn("expected_points", spec, folder.name)


if __name__ == "__main__":
    unittest.main()


class Provenance(unittest.TestCase):
    """A committed result comes from a clean tree at a commit in the history
    (oomlab_report/provenance.py); check_results fails anything else, reports the listed
    exceptions as pending, and fails an exception that is no longer needed."""

    def setUp(self):
        from oomlab_report.provenance import provenance_problem
        self.problem = provenance_problem
        self.head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()

    def doc(self, sha, dirty):
        return {"context": {"git_sha": sha, "git_dirty": dirty}}

    def test_each_problem_is_named(self):
        if not self.head:
            self.skipTest("not a git checkout")
        self.assertIsNone(self.problem(self.doc(self.head, False), ROOT))
        self.assertIn("uncommitted changes", self.problem(self.doc(self.head, True), ROOT))
        self.assertIn("not in this repository's history", self.problem(self.doc("0123456789abcdef" * 2 + "01234567", False), ROOT))
        self.assertIn("no git commit", self.problem(self.doc("unknown", False), ROOT))
        self.assertIn("no git commit", self.problem({}, ROOT))

    def test_check_results_fails_pends_and_ratchets(self):
        clean = json.loads((ROOT / "reports/results/01_vgg16_memory.json").read_text())
        if self.problem(clean, ROOT):
            self.skipTest("01's commit is not in this checkout's history")
        with tempfile.TemporaryDirectory() as top:
            tmp = Path(top) / "results"   # provenance_exceptions.json sits beside the results folder
            tmp.mkdir()
            dirty = dict(clean, context=dict(clean["context"], git_dirty=True))
            (Path(tmp) / "01_vgg16_memory.json").write_text(json.dumps(dirty))
            r = run(sys.executable, "scripts/check_results.py", tmp)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("uncommitted changes", r.stdout)
            exceptions = Path(top) / "provenance_exceptions.json"
            exceptions.write_text(json.dumps({"01_vgg16_memory.json": "rerun pending"}))
            r = run(sys.executable, "scripts/check_results.py", tmp)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertIn("pending", r.stdout)
            (Path(tmp) / "01_vgg16_memory.json").write_text(json.dumps(clean))
            r = run(sys.executable, "scripts/check_results.py", tmp)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("remove it from provenance_exceptions.json", r.stdout)
            r = run(sys.executable, "scripts/check_results.py", "--schema-only", tmp)
            self.assertEqual(r.returncode, 0, r.stdout)
