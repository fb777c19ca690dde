"""test_report.py — the Python side of the results: an experiment is one folder.

PlantedExperiment copies experiments/ to a temporary folder, plants 99_planted there (spec,
README, summary schema and report.py; no driver, so the runner's generic driver summarises
it), runs it with the built oomlab, and sees check_results accept it and make_report render
its section and figure; a summary its schema rejects, or a report.py without render(), is an
error that writes nothing. Schema covers oomlab_report/schema.py's subset; Folders checks
that every committed experiment folder is complete; Verdicts that "pending GPU" validates and
renders and that the report states the verdict rule once, above the index.
Run: python3 -m unittest tests/test_report.py  (OOMLAB_BUILD_DIR: the build with oomlab)
"""
import json
import os
import re
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
from tests.report_test_util import python_with_matplotlib  # noqa: E402


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



class Verdicts(unittest.TestCase):
    """The status "pending GPU" (a space in it) validates and renders; the report states the
    rule once (oomlab_report/verdict_rule.py), above the index."""

    def test_pending_gpu_validates_and_renders(self):
        from oomlab_report.results import load_results
        from oomlab_report.verdict_rule import RULE_TEXT
        doc = json.loads((ROOT / "reports/results/04_transformer_activation_memory.json").read_text())
        with tempfile.TemporaryDirectory() as top:
            results, out = Path(top) / "results", Path(top) / "report"
            results.mkdir()
            path = results / "04_transformer_activation_memory.json"
            path.write_text(json.dumps(dict(doc, verdict={"status": "pending", "reason": "r"})))
            with self.assertRaisesRegex(Exception, "verdict.status 'pending' not one of"):
                load_results(path)
            path.write_text(json.dumps(dict(doc, verdict={"status": "pending GPU", "reason": "no GPU run yet"})))
            self.assertEqual(load_results(path)["verdict"]["status"], "pending GPU")
            r = run(python_with_matplotlib(), "scripts/make_report.py", "--results", results, "--out", out)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            text = (out / "REPORT.md").read_text()
        self.assertIn("| **pending GPU** |", text)
        self.assertIn("### Verdict: **pending GPU**\n\nno GPU run yet", text)
        self.assertEqual(text.count(RULE_TEXT), 1)
        self.assertLess(text.index("**How verdicts are judged.**"), text.index("| experiment | title |"))

    def test_the_statuses_are_the_cpp_rules(self):
        cpp = ROOT / "experiments/runner/verdict_rule.cpp"
        if not cpp.exists():
            self.skipTest(f"{cpp} not in this checkout")
        from oomlab_report.verdict_rule import VERDICTS
        body = cpp.read_text().split("std::string verdict_status(", 1)[1].split("\n}\n", 1)[0]
        self.assertEqual(set(re.findall(r'"([^"]+)"', body)), set(VERDICTS))   # every literal a status


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


GPU_RECORD = ROOT / "reports/results/gpu/h100-2026-11-25"
SHA_518 = "518c647d9a85c41bda0c9e5695cb151cc823b629"


def in_history(sha):
    return subprocess.run(["git", "merge-base", "--is-ancestor", sha, "HEAD"], cwd=ROOT,
                          capture_output=True).returncode == 0


def copy_record(top, name="rec"):
    """The committed record copied to top/gpu/name (a GPU results folder of its own)."""
    dest = Path(top) / "gpu" / name
    shutil.copytree(GPU_RECORD, dest)
    for f in dest.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    return dest


@unittest.skipUnless(GPU_RECORD.is_dir(), f"{GPU_RECORD} not committed")
class CpuAttentionVsTorch(unittest.TestCase):
    """Experiment 15's CPU table beside PyTorch's SDPA comes from attention_vs_torch.py's file:
    the paired ratio of each case's rounds, the build's sha; a missing or broken file: no table."""

    def test_the_table_is_the_files_rounds(self):
        from oomlab_report.bench_points import attention_vs_torch_table as table
        rounds = [{"oomlab_fused_ms": f, "torch_sdpa_ms": t} for f, t in ((10, 20), (11, 20), (9, 20), (10, 21), (10, 19))]
        doc = {"threads": 2, "torch": "2.x", "rounds": 5, "oomlab_context": {"oomlab_git_sha": "abc123", "oomlab_git_dirty": "false"},
               "cases": [{"seq": 512, "dropout": 0.1, "torch_sdpa_backend": "math", "rounds": rounds,
                          "median_ms": {"oomlab_eager_ms": 9, "oomlab_fused_ms": 10, "torch_math_ms": 20, "torch_sdpa_ms": 20}}]}
        with tempfile.TemporaryDirectory() as top:
            f = Path(top) / "a.json"
            f.write_text(json.dumps(doc))
            md = table(f)
            from oomlab_report.verdict_rule import paired_ratio
            i = paired_ratio([10, 11, 9, 10, 10], [20, 20, 20, 21, 19])
            self.assertIn(f"| 512 | 10% | 9.0 | 10.0 | 20.0 | 20.0 (math) | {i['estimate']:.2f} ({i['lo']:.2f}-{i['hi']:.2f}; "
                          "5 rounds) |", md)
            self.assertIn("oomlab `abc123`", md)
            self.assertNotIn("dirty", md)
            f.write_text("{broken")
            self.assertEqual(table(f), "")
            self.assertEqual(table(Path(top) / "missing.json"), "")


@unittest.skipUnless(GPU_RECORD.is_dir(), f"{GPU_RECORD} not committed")
class GpuProvenance(unittest.TestCase):
    """check_results fails a GPU record without provenance.json, with an unknown commit or a
    declared patch that is not there, and passes the committed record."""

    def check(self, path):
        return run(sys.executable, "scripts/check_results.py", path)

    def test_the_committed_record_passes(self):
        if not in_history(SHA_518):
            self.skipTest("518c647 is not in this checkout's history")
        r = self.check(GPU_RECORD)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("1/1 GPU records valid", r.stdout)

    def test_no_provenance_json_fails(self):
        with tempfile.TemporaryDirectory() as top:
            rec = copy_record(top)
            (rec / "provenance.json").unlink()
            r = self.check(rec.parent)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("no provenance.json", r.stdout)

    def test_an_unknown_commit_or_a_missing_patch_fails(self):
        with tempfile.TemporaryDirectory() as top:
            rec = copy_record(top)
            prov = json.loads((rec / "provenance.json").read_text())
            (rec / "provenance.json").write_text(json.dumps(dict(prov, commit="0123456789abcdef" * 2 + "01234567")))
            r = self.check(rec)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("unknown or not an ancestor of HEAD", r.stdout)
            (rec / "provenance.json").write_text(json.dumps(prov))
            (rec / "run2/local_patch.diff").unlink()
            r = self.check(Path(top))   # a results folder whose gpu/ holds the record
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("runs.run2.local_patch 'run2/local_patch.diff' is not a file of the record", r.stdout)

    def test_a_dirty_result_needs_a_declared_patch(self):
        from oomlab_report.provenance import gpu_record_problems
        if not in_history(SHA_518):
            self.skipTest("518c647 is not in this checkout's history")
        with tempfile.TemporaryDirectory() as top:
            rec = copy_record(top)
            prov = json.loads((rec / "provenance.json").read_text())
            self.assertEqual(gpu_record_problems(rec, ROOT), [])
            prov["runs"]["run3"]["local_patch"] = None
            del prov["machine"]["driver"]
            (rec / "provenance.json").write_text(json.dumps(prov))
            problems = gpu_record_problems(rec, ROOT)
        self.assertIn("`machine` lacks driver", problems)
        self.assertIn("run3/res/cuda1.json: made from a tree with uncommitted changes, and provenance.json "
                      "declares no local_patch for run3", problems)


if __name__ == "__main__":
    unittest.main()
