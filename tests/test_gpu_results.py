"""test_gpu_results.py — the experiments' GPU points in their sections (oomlab_report/gpu_results.py):
the newest record by run start holding a finished NN_name.json of the gpu profile answers (a
dry run's record and a partial file never do), and the experiment's status over its CPU / meta
and GPU verdicts follows docs/VERDICTS.md. Records are planted in a temporary folder.
Run: python3 -m unittest tests/test_gpu_results.py
"""
import copy
import json
import sys
import tempfile
import unittest
from pathlib import Path

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
