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
class GpuSection(unittest.TestCase):
    """REPORT.md's GPU results section (oomlab_report/gpu_section.py) renders the committed
    record, every figure recomputed here from its files; a missing file renders "missing"."""

    @staticmethod
    def oomlab(run, tag, root=GPU_RECORD):
        d = json.loads((root / run / "res" / f"oomlab_{tag}.json").read_text())
        return 1e3 * d["metrics"]["step_time_s"]["median"], d["memory"]["totals"]["allocated_bytes.all.peak"]

    @staticmethod
    def torch(run, tag):
        lines = [json.loads(t) for t in (GPU_RECORD / run / "res" / "torch.jsonl").read_text().splitlines()]
        line = [x for x in lines if x["tag"] == tag][-1]
        return line["median_ms"], line["peak_allocated"]

    def render(self, gpu_dir=GPU_RECORD.parent):
        from oomlab_report.gpu_section import render_gpu_section
        return render_gpu_section(gpu_dir, ROOT / "experiments", "reports/results")

    def test_t3_rows_are_the_files_figures(self):
        md = self.render()
        self.assertIn("## GPU results", md)
        self.assertIn("#### T3", md)
        for name, run, prefix in (("ResNet-50 b128", "run1", "r50"), ("BERT-base b32 s128", "run2", "bert")):
            (o32, op32), (t32, tp32) = self.oomlab(run, f"{prefix}_fp32"), self.torch(run, f"{prefix}_fp32")
            for prec, p in (("TF32", "tf32"), ("AMP bf16", "bf16"), ("AMP fp16", "fp16")):
                (o, op), (t, tp) = self.oomlab(run, f"{prefix}_{p}"), self.torch(run, f"{prefix}_{p}")
                dagger = "†" if run == "run2" else ""
                row = (f"| {name} | {prec} | {run}{dagger} / {run} | {o:.1f} | {o32 / o:.2f}× | {op / 1e9:.3f} | "
                       f"{op / op32:.3f} | {t:.1f} | {t32 / t:.2f}× | {tp / 1e9:.3f} | {tp / tp32:.3f} |")
                self.assertIn(row, md)

    def test_t4_rows_are_the_files_figures(self):
        md = self.render()
        self.assertIn("#### T4", md)
        none_ms, none_peak = self.oomlab("run2", "bert384_none")
        for mode, tag in (("selective:attention,gelu", "bert384_selective"), ("all", "bert384_all")):
            ms, peak = self.oomlab("run2", tag)
            self.assertIn(f"| oomlab (run2†) | {mode} | {ms:.1f} | {100 * (ms / none_ms - 1):+.1f}% | "
                          f"{peak / 1e9:.3f} | {100 * (peak / none_peak - 1):+.1f}% |", md)
        (n, npk), (g, gpk) = self.torch("run2", "bert384_none"), self.torch("run2", "bert384_gc")
        self.assertIn(f"| PyTorch eager (run2) | HF gradient checkpointing | {g:.1f} | {100 * (g / n - 1):+.1f}% | "
                      f"{gpk / 1e9:.3f} | {100 * (gpk / npk - 1):+.1f}% |", md)
        src = json.loads((ROOT / "experiments/06_checkpointing/experiment.json").read_text())["source"]
        self.assertIn(f"{100 * (src['memory_mb_with'] / src['memory_mb_without'] - 1):+.1f}% |", md)
        self.assertIn("inconclusive under the ≥5-alternating-pairs rule", md)

    def test_a_missing_file_renders_missing(self):
        with tempfile.TemporaryDirectory() as top:
            rec = copy_record(top)
            (rec / "run1/res/oomlab_r50_bf16.json").unlink()
            (rec / "run2/res/torch.jsonl").unlink()
            (rec / "provenance.json").unlink()
            (rec / "README.md").unlink()
            md = self.render(rec.parent)
        self.assertIn("| ResNet-50 b128 | AMP bf16 | run1 / run1 | missing | — | missing | — |", md)
        # run2's PyTorch lines gone: T3 takes run1's (the other side's ratios stay within one call)
        self.assertRegex(md, r"\| BERT-base b32 s128 \| AMP fp16 \| run2 / run1 \| [\d.]+ \| [\d.]+× \| [\d.]+ \| "
                             r"[\d.]+ \| missing \| — \| missing \| — \|")
        self.assertRegex(md, r"\| run2 \| BERT-base b32 s128 TF32 \| [\d.]+ \| missing \| — \| [\d.]+ \| missing \| — \|")
        self.assertIn("provenance.json missing", md)
        self.assertIn("Meta peaks of the benchmark configurations: missing", md)

    def test_make_report_appends_it_after_the_experiments(self):
        with tempfile.TemporaryDirectory() as out:
            r = run(python_with_matplotlib(), "scripts/make_report.py", "--out", out)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            text = (Path(out) / "REPORT.md").read_text()
        self.assertIn("[GPU results](#gpu-results)", text.split("## 01_")[0])
        self.assertGreater(text.index("## GPU results"), text.index("## 13_lr_scaling"))


KIT_RECORD = ROOT / "reports/results/gpu/h200-2026-11-26-kit2"


@unittest.skipUnless(KIT_RECORD.is_dir(), f"{KIT_RECORD} not committed")
class GpuKitSection(unittest.TestCase):
    """A GPU kit's record (one call, its results in logs.tar.gz) in the GPU section: every
    figure recomputed here from the archive; PyTorch's profile answers are not measurements;
    a record whose archive is gone renders "missing", never an error."""

    @staticmethod
    def archive():
        import tarfile
        files = {}
        with tarfile.open(KIT_RECORD / "logs.tar.gz") as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.startswith("res/") and m.name.endswith((".json", ".jsonl")):
                    files[m.name[4:]] = tar.extractfile(m).read().decode()
        return files

    def render(self, gpu_dir):
        from oomlab_report.gpu_section import render_gpu_section
        return render_gpu_section(gpu_dir, ROOT / "experiments", "reports/results")

    def test_a_part_of_the_kit_without_pairs_says_so(self):
        part = KIT_RECORD.parent / "h200-2026-11-27-kit5-models"   # OOMLAB_KIT_TESTS=test_cuda_models alone
        if not part.is_dir():
            self.skipTest(f"{part} not committed")
        with tempfile.TemporaryDirectory() as top:
            shutil.copytree(part, Path(top) / "gpu" / part.name)
            md = self.render(Path(top) / "gpu")
        self.assertIn("This record holds no oomlab / PyTorch pairs", md)
        self.assertNotIn("#### oomlab vs PyTorch eager, same call", md)
        self.assertNotIn("Meta peaks of the benchmark configurations", md)
        self.assertIn("| test_cuda_models | 39 | 0 | 0 | 0 |", md)

    def test_rows_are_the_archives_figures(self):
        with tempfile.TemporaryDirectory() as top:
            shutil.copytree(KIT_RECORD, Path(top) / "gpu" / KIT_RECORD.name)
            md = self.render(Path(top) / "gpu")
        files = self.archive()
        runs = [json.loads(t) for t in files["torch.jsonl"].splitlines()]
        for tag, name in (("r50_tf32", "ResNet-50 b128 TF32"), ("bert_fp16", "BERT-base b32 s128 AMP fp16")):
            doc = json.loads(files[f"oomlab_{tag}.json"])
            ms, peak = 1e3 * doc["metrics"]["step_time_s"]["median"], doc["memory"]["totals"]["allocated_bytes.all.peak"]
            line = next(x for x in runs if x["tag"] == tag and "median_ms" in x)   # not its profile answer
            self.assertIn(f"| kit | {name} | {ms:.1f} | {line['median_ms']:.1f} | {ms / line['median_ms']:.2f} | "
                          f"{peak / 1e9:.3f} | {line['peak_allocated'] / 1e9:.3f} | "
                          f"{peak / line['peak_allocated']:.3f} |", md)
        meta = json.loads(files["meta_bert384_none.json"])["memory"]["totals"]["allocated_bytes.all.peak"]
        cuda = json.loads(files["oomlab_bert384_none.json"])["memory"]["totals"]["allocated_bytes.all.peak"]
        tot = {s: json.loads(files[f"{s}_bert384_none.json"])["memory"]["totals"] for s in ("meta", "oomlab")}
        req = tot["meta"]["requested_bytes.all.current"] - tot["oomlab"]["requested_bytes.all.current"]
        self.assertIn(f"| bert384_none | {meta:,} | {cuda:,} | {meta / cuda:.4f} | {req:,} |", md)
        self.assertRegex(md, r"Requested bytes at the end equal to the byte: \d+ of \d+\.")
        tests = json.loads((KIT_RECORD / "tests.json").read_text())["binaries"]
        self.assertIn(f"In all: {sum(b['passed'] for b in tests.values())} passed, "
                      f"{sum(b['failed'] for b in tests.values())} failed", md)
        self.assertIn("DDP on 2 devices + SyncBN", md)
        self.assertIn("fused attention (reference kernels) vs PyTorch SDPA", md)

    def test_a_meta_run_that_stopped_before_the_capture_is_marked(self):
        from oomlab_report.gpu_kit_parts import meta_json_part

        def doc(captured_at, requested):
            return {"config": {"model": "resnet50", "batch": 128, "cuda_graphs": True},
                    "metrics": {"cuda_graphs": {"captured_at_step": captured_at, "warmup_steps": 3}},
                    "memory": {"totals": {"allocated_bytes.all.peak": 1000,
                                          "requested_bytes.all.current": requested}}}

        class Rec:
            def __init__(self, meta, cuda):
                self.meta, self.cuda = {("kit", "g"): meta}, cuda

            def oomlab_doc(self, run, tag):
                return self.cuda

        early = "\n".join(meta_json_part(Rec(doc(0, 10), doc(4, 1048590))))
        self.assertIn("| -1,048,580 ‡ |", early)
        self.assertIn("‡ 1 `--cuda-graphs` row(s) whose meta run stopped before the capture", early)
        captured = "\n".join(meta_json_part(Rec(doc(4, 1048590), doc(4, 1048590))))
        self.assertIn("| 0 |", captured)
        self.assertNotIn("‡", captured)

    def test_without_its_archive_it_renders_missing(self):
        with tempfile.TemporaryDirectory() as top:
            rec = Path(top) / "gpu" / KIT_RECORD.name
            shutil.copytree(KIT_RECORD, rec)
            (rec / "logs.tar.gz").write_bytes(b"not gzip")
            md = self.render(rec.parent)
        self.assertIn("logs.tar.gz: unreadable", md)
        self.assertNotIn("#### T3", md)   # no configuration of the table left: the table is left out
        self.assertIn("#### oomlab vs PyTorch eager, same call", md)


class GpuPoints(unittest.TestCase):
    """An experiment's GPU points (oomlab_report/gpu_points.py) come from one call: the newest
    kit record holding every tag the table needs; none, and the table is left out."""

    @staticmethod
    def record(top, name, date, points):
        d = Path(top) / name
        d.mkdir(parents=True)
        (d / "points.json").write_text(json.dumps(points))
        (d / "provenance.json").write_text(json.dumps({"date": date, "commit": "abcdef1234567890",
                                                       "machine": {"gpu": "NVIDIA H200"}}))

    def test_the_newest_record_with_every_tag_in_one_call(self):
        from oomlab_report.gpu_points import gpu_table, one_call
        pt = lambda o, t=None: {"oomlab": {"median_ms": o, "peak_allocated": 2e9},  # noqa: E731
                                "torch": None if t is None else {"median_ms": t, "peak_allocated": 3e9}}
        with tempfile.TemporaryDirectory() as top:
            self.assertEqual(gpu_table([("r", "a", "b")], gpu_dir=top), "")
            self.record(top, "old", "2026-11-26", {"a": pt(10, 20), "b": pt(5, 10)})
            self.record(top, "new", "2026-11-27", {"a": pt(8, 16)})   # lacks b: not one call for the table
            self.record(top, "broken", "2026-11-28", {})
            (Path(top) / "broken" / "points.json").write_text("{not json")
            self.assertEqual(one_call(["a"], top)[0], "new")
            self.assertEqual(one_call(["a", "b"], top)[0], "old")
            md = gpu_table([("row", "a", "b")], gpu_dir=top, base="eager", other="fused", peaks=True)
            self.assertIn("| row | 10.0 | 5.0 | 0.50 | 20.0 | 10.0 | 0.50 | 2.000 | 2.000 | 1.000 | 3.000 | 3.000 | 1.000 |",
                          md)
            self.assertIn("`old`", md)
            self.assertIn("NVIDIA H200, the kit at `abcdef123456`", md)
            self.assertIn("inconclusive", md)


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


class GpuLabels(unittest.TestCase):
    """A switched row (gpu_run.sh's PREV / GRAPH / TILED rows, --channels-last,
    --cuda-graphs) is labelled by what it switched, so the report never shows it under its
    default's label."""

    def test_switched_paths_are_named(self):
        from oomlab_report.gpu_record import describe_oomlab, label
        base = {"config": {"model": "resnet50", "batch": 128, "amp": "bf16"}, "context": {"device_properties": {}}}
        self.assertEqual(label(describe_oomlab(base)), "ResNet-50 b128 AMP bf16")
        props = {"vectorized_elementwise": "true", "bn_one_pass": "true", "foreach_optimizer": "true",
                 "token_inputs_on_device": "true", "cudnn_graph_api": "false"}
        today = {"config": dict(base["config"], fuse_relu=True), "context": {"device_properties": props}}
        self.assertEqual(label(describe_oomlab(today)), "ResNet-50 b128 AMP bf16, fused ReLU")
        prev = {k: "false" if k != "cudnn_graph_api" else v for k, v in props.items()}
        old = {"config": base["config"], "context": {"device_properties": prev}}
        self.assertEqual(label(describe_oomlab(old)), "ResNet-50 b128 AMP bf16, issue-31 paths off")
        one = {"config": base["config"], "context": {"device_properties": dict(props, bn_one_pass="false")}}
        self.assertEqual(label(describe_oomlab(one)), "ResNet-50 b128 AMP bf16, three-pass BN")
        cl = {"config": dict(base["config"], channels_last=True, cuda_graphs=True),
              "context": {"device_properties": props}}
        self.assertEqual(label(describe_oomlab(cl)), "ResNet-50 b128 AMP bf16, channels_last, CUDA graphs")
        pin = {"config": dict(base["config"], pin_memory=True), "context": {"device_properties": props}}
        self.assertEqual(label(describe_oomlab(pin)), "ResNet-50 b128 AMP bf16, pinned batches")
        graph = {"config": base["config"], "context": {"device_properties": {"cudnn_graph_api": "true"}}}
        self.assertEqual(label(describe_oomlab(graph)), "ResNet-50 b128 AMP bf16, cuDNN graph API")
        # since aa21f01's H100 run the graph API is auto on channels_last: named where it ran
        auto = {"vectorized_elementwise": "true", "cudnn_graph_api": "channels_last"}
        cl_auto = {"config": dict(base["config"], channels_last=True), "context": {"device_properties": auto}}
        self.assertEqual(label(describe_oomlab(cl_auto)), "ResNet-50 b128 AMP bf16, channels_last, cuDNN graph API")
        nchw_auto = {"config": base["config"], "context": {"device_properties": auto}}
        self.assertEqual(label(describe_oomlab(nchw_auto)), "ResNet-50 b128 AMP bf16")
        split = {"config": base["config"], "context": {"device_properties": dict(auto, embedding_split="true")}}
        self.assertEqual(label(describe_oomlab(split)), "ResNet-50 b128 AMP bf16, split embedding backward")
        one_pass = dict(auto, bn_cl_one_pass="true")   # named on channels_last rows only, where it runs
        self.assertEqual(label(describe_oomlab({"config": cl_auto["config"], "context": {"device_properties": one_pass}})),
                         "ResNet-50 b128 AMP bf16, channels_last, cuDNN graph API, one-pass channels_last BN")
        self.assertEqual(label(describe_oomlab({"config": base["config"], "context": {"device_properties": one_pass}})),
                         "ResNet-50 b128 AMP bf16")
        bert = {"config": {"model": "bert-base", "batch": 24, "seq_len": 384, "attention": "fused"},
                "context": {"device_properties": {"tiled_attention": "true", "flash_attention": "true"}}}
        self.assertIn("fused attention (flash kernels)", label(describe_oomlab(bert)))
        bert["context"]["device_properties"]["flash_attention"] = "false"
        self.assertIn("fused attention (tiled kernels)", label(describe_oomlab(bert)))
        bert["context"]["device_properties"].update(tc_attention="true", flash_attention="true")
        self.assertIn("fused attention (flash kernels)", label(describe_oomlab(bert)))   # fp32 without TF32
        bert["context"]["device_properties"]["matmul_allow_tf32"] = "true"   # afbeb1e: TF32 float32 on tensor cores
        self.assertIn("fused attention (tensor-core kernels)", label(describe_oomlab(bert)))
        bert["context"]["device_properties"]["tc_attention_inputs"] = "16-bit"   # since: float32 runs flash
        self.assertIn("fused attention (flash kernels)", label(describe_oomlab(bert)))
        bert["config"]["amp"] = "bf16"
        self.assertIn("fused attention (tensor-core kernels)", label(describe_oomlab(bert)))
        bert["context"]["device_properties"]["mma_attention"] = "true"   # OOMLAB_CUDA_MMA_ATTENTION=1
        self.assertIn("fused attention (16-bit mma kernels)", label(describe_oomlab(bert)))
        bert["config"]["amp"] = None   # float32 inputs: the switch does not apply
        self.assertIn("fused attention (flash kernels)", label(describe_oomlab(bert)))


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
