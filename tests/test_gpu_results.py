"""test_gpu_results.py — the experiments' GPU points in their sections (oomlab_report/gpu_results.py):
the newest record by run start holding a finished NN_name.json of the gpu profile answers (a
dry run's record and a partial file never do), and the experiment's status over its CPU / meta
and GPU verdicts follows docs/VERDICTS.md. GpuFigure: a planted record makes make_report draw
figures/05_amp_gpu.png (a PNG), link it in the GPU subsection and list it in --expected-figures;
without one it draws and lists none (oomlab_report/gpu_figure.py). Records are planted in a
temporary folder.
Run: python3 -m unittest tests/test_gpu_results.py
"""
import copy
import json
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

from tests.report_test_util import python_with_matplotlib, run_make_report

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))   # a test is not a script of scripts/

TEMPLATE = json.loads((ROOT / "reports" / "results" / "05_amp.json").read_text())


def gpu_doc(status, judged="holds"):
    """05_amp's results reshaped as its gpu profile's: one claim, judged `judged`."""
    doc = copy.deepcopy(TEMPLATE)
    doc["config"]["profile"], doc["config"]["device"] = "gpu", "cuda"
    doc["points"] = doc["points"][:2]
    claim = {"name": "bf16 is faster", "metric": "step_time", "bound": "below 1", "judged": judged, "n": 5,
             "estimate": 0.6, "lo": 0.58, "hi": 0.62, "enough": True, "failed_points": [],
             "text": f"bf16 is faster: 0.600x (95% CI 0.580-0.620, 5 pairs), claimed below 1: {judged}"}
    doc["summary"] = {"device": "cuda", "on_gpu": True, "claims": [claim]}
    doc["verdict"] = {"status": status, "reason": claim["text"] + "."}
    return doc


def plant(top, name, started_at, doc=None, dry_run=False, partial=False):
    d = Path(top) / name
    d.mkdir(parents=True)
    (d / "provenance.json").write_text(json.dumps({"date": started_at[:10], "started_at": started_at,
                                                   "dry_run": dry_run, "commit": "abc1234"}))
    (d / ("05_amp.partial.json" if partial else "05_amp.json")).write_text(json.dumps(doc or gpu_doc("confirmed")))
    return d


class NewestGpuResult(unittest.TestCase):
    def test_the_newest_run_answers_not_a_dry_run_or_a_partial(self):
        from oomlab_report.gpu_results import newest
        with tempfile.TemporaryDirectory() as tmp:
            self.assertIsNone(newest("05_amp", tmp))
            plant(tmp, "h200-b", "2026-11-30T06:00:00Z", gpu_doc("refuted", "fails"))
            plant(tmp, "h100-a", "2026-11-30T07:00:00Z", gpu_doc("confirmed"))
            plant(tmp, "h100-z-dry", "2026-11-30T09:00:00Z", gpu_doc("refuted", "fails"), dry_run=True)
            plant(tmp, "h100-y-cut", "2026-11-30T10:00:00Z", gpu_doc("refuted", "fails"), partial=True)
            got = newest("05_amp", tmp)
            self.assertEqual((got.record, got.doc["verdict"]["status"]), ("h100-a", "confirmed"))
            self.assertIn("07:00:00", got.started)
            broken = gpu_doc("confirmed")
            del broken["summary"]["claims"]
            plant(tmp, "h100-x-broken", "2026-11-30T11:00:00Z", broken)   # fails the gpu summary schema
            self.assertEqual(newest("05_amp", tmp).record, "h100-a")

    def test_the_section_shows_the_claims_and_the_record(self):
        from oomlab_report.gpu_results import newest, section
        with tempfile.TemporaryDirectory() as tmp:
            plant(tmp, "h100-a", "2026-11-30T07:00:00Z")
            text = section("05_amp", newest("05_amp", tmp), "reports/results")
            self.assertIn("### GPU points: **confirmed**", text)
            self.assertIn("h100-a", text)
            self.assertIn("| bf16 is faster | 0.600x (95% CI 0.580-0.620, 5 pairs) | below 1 | **holds** |", text)
            self.assertIn("No GPU record", section("05_amp", None, "reports/results"))


class GpuFigure(unittest.TestCase):
    def test_the_claims_units_and_values_come_from_their_text(self):
        from oomlab_report.gpu_figure import bound_of, unit_of
        from oomlab_report.gpu_results import measured
        claim = gpu_doc("confirmed")["summary"]["claims"][0]
        self.assertEqual((measured(claim), unit_of(claim)), ("0.600x (95% CI 0.580-0.620, 5 pairs)", "x"))
        named = dict(claim, name="bert: the peak equals meta's", text="bert: the peak equals meta's: 0.982x "
                     "(1 point: no interval), claimed within [0.99, 1.01]: fails", bound="within [0.99, 1.01]")
        self.assertEqual((measured(named), bound_of(named)), ("0.982x (1 point: no interval)", ("within", (0.99, 1.01))))
        empty = dict(claim, n=0, text="bf16 is faster: no value (no point of the claim finished), claimed below 1: "
                     "too few runs")
        self.assertEqual(unit_of(empty, [{"name": "bf16 is faster", "base": {}}]), "x")
        self.assertEqual(unit_of(empty), " ms")
        self.assertEqual(bound_of(dict(claim, bound="above 0.95")), ("above", 0.95))

    def test_a_planted_record_draws_the_figure_and_the_section_links_it(self):
        if python_with_matplotlib() is None:
            self.skipTest("no python with matplotlib")
        with tempfile.TemporaryDirectory() as tmp:
            results, out = Path(tmp) / "results", Path(tmp) / "out"
            results.mkdir()
            shutil.copy(ROOT / "reports" / "results" / "05_amp.json", results)

            def make_report(*extra):
                return run_make_report("--results", results, "--out", out, *extra, timeout=300)
            r = make_report("--expected-figures")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("figures/05_amp_gpu.png", r.stdout)   # no record: no GPU figure
            doc = gpu_doc("depends")
            doc["summary"]["claims"].append(dict(doc["summary"]["claims"][0], name="bf16 lowers the peak",
                                                 metric="peak_allocated", judged="fails", n=1, estimate=1.2, lo=1.2,
                                                 hi=1.2, text="bf16 lowers the peak: 1.200x (1 point: no interval), "
                                                 "claimed below 1: fails"))
            plant(results / "gpu", "h100-a", "2026-11-30T07:00:00Z", doc)
            r = make_report("--expected-figures")
            self.assertIn("figures/05_amp_gpu.png", r.stdout.splitlines())
            r = make_report()
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual((out / "figures" / "05_amp_gpu.png").read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
            text = (out / "REPORT.md").read_text()
            gpu_part = text[text.index("### GPU points: **"):]
            self.assertIn("![05_amp: GPU claims, measured vs claimed](figures/05_amp_gpu.png)", gpu_part)


class CombinedStatus(unittest.TestCase):
    def test_the_cpu_verdicts_open_gpu_claims_are_the_gpu_verdicts(self):
        from oomlab_report.gpu_results import combined_status
        cases = [("pending GPU", None, "pending GPU"), ("confirmed", None, "confirmed"),
                 ("pending GPU", "confirmed", "confirmed"), ("pending GPU", "refuted", "depends"),
                 ("confirmed", "inconclusive", "inconclusive"), ("refuted", "refuted", "refuted"),
                 ("depends", "confirmed", "depends"), ("pending GPU", "pending GPU", "pending GPU"),
                 ("inconclusive", "confirmed", "inconclusive"), ("confirmed", "depends", "depends")]
        for cpu, gpu, want in cases:
            self.assertEqual(combined_status(cpu, gpu), want, (cpu, gpu))


if __name__ == "__main__":
    unittest.main()
