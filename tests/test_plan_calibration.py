"""test_plan_calibration.py — scripts/plan_calibration.py: the least-squares throughput and
its leave-one-out on planted pairs (exact where the model holds), and on the committed GPU
records with the built oomlab (every pair's measured time is its record's, its FLOPs are
counted, its leave-one-out prediction is the fit of the others)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import plan_calibration  # noqa: E402

BUILD = os.environ.get("OOMLAB_BUILD_DIR", os.path.join(ROOT, "build"))


class Fit(unittest.TestCase):
    def test_a_constant_throughput_is_recovered(self):
        pairs = [{"flops": f, "ms": f / 5e10} for f in (1e12, 2e12, 7e12)]
        self.assertAlmostEqual(plan_calibration.fit_k(pairs), 1 / 5e10)

    def test_estimate_args_keep_what_changes_the_flops(self):
        args = plan_calibration.estimate_args("--model bert-base --batch 24 --seq-len 384 --allow-tf32 all "
                                              "--checkpoint all")
        self.assertEqual(args, ["--model", "bert-base", "--batch", "24", "--seq-len", "384", "--checkpoint", "all",
                                "--optimizer", "adamw"])
        self.assertEqual(plan_calibration.precision_class("--model resnet50 --allow-tf32 none"), "fp32")


@unittest.skipUnless(os.path.exists(os.path.join(BUILD, "oomlab")), "needs the built oomlab (OOMLAB_BUILD_DIR)")
class OnTheRecords(unittest.TestCase):
    def test_every_pair_is_its_record_and_the_fit_of_the_others(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cal.json")
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plan_calibration.py"), "--build", BUILD,
                            "--out", out], check=True, capture_output=True)
            cal = json.load(open(out))
        pairs = cal["pairs"]
        self.assertGreaterEqual(len(pairs), 20)
        for p in pairs:
            points = json.load(open(os.path.join(ROOT, "reports", "results", "gpu", p["record"], "points.json")))
            self.assertEqual(p["ms"], float(points[p["tag"]]["oomlab"]["median_ms"]))
            self.assertGreater(p["flops"], 0)
            others = [q for q in pairs if q["card"] == p["card"] and q["class"] == p["class"] and q is not p]
            if others:
                self.assertAlmostEqual(p["loo_ms"], p["flops"] * plan_calibration.fit_k(others), places=6)
        errors = sorted(p["loo_error"] for p in pairs if "loo_error" in p)
        self.assertAlmostEqual(cal["summary"]["worst_relative_error"], errors[-1])


if __name__ == "__main__":
    unittest.main()
