"""test_plan_calibration.py — scripts/plan_calibration.py: the non-negative least squares
recovers planted coefficients; the flags it gives `oomlab estimate` keep what changes the
counted work; the committed calibration (reports/plan_calibration.json) is the fit and the
leave-one-configuration-out of its own pairs, every pair's time is its record's, and the
median error meets issue 52's bar (<= 20%); with the built oomlab, the features recounted
now are the committed ones (a stale calibration fails)."""
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
COMMITTED = os.path.join(ROOT, "reports", "plan_calibration.json")


class Fit(unittest.TestCase):
    def test_planted_coefficients_are_recovered(self):
        truth = {"a": 2.0, "b": 0.5, "c": 0.0}
        feats = [{"a": 1, "b": 2, "c": 3}, {"a": 3, "b": 1, "c": 0}, {"a": 0.5, "b": 4, "c": 1}, {"a": 2, "b": 2, "c": 2}]
        pairs = [{"features_ms": f, "ms": plan_calibration.predict(truth, f)} for f in feats]
        coef = plan_calibration.fit(pairs, ["a", "b", "c"])
        for k, v in truth.items():
            self.assertAlmostEqual(coef[k], v, places=9)

    def test_coefficients_never_go_negative(self):
        x = plan_calibration.nnls([[1, 1], [1, 2], [1, 3]], [3, 2, 1])   # the free fit's slope is -1
        self.assertTrue(all(v >= 0 for v in x))
        self.assertAlmostEqual(x[1], 0.0)
        self.assertAlmostEqual(x[0], 2.0)

    def test_estimate_args_keep_what_changes_the_work(self):
        args = plan_calibration.estimate_args("--model bert-base --batch 24 --seq-len 384 --allow-tf32 all "
                                              "--checkpoint all")
        self.assertEqual(args, ["--model", "bert-base", "--batch", "24", "--seq-len", "384", "--checkpoint", "all",
                                "--optimizer", "adamw"])
        args = plan_calibration.estimate_args("--model resnet50 --batch 128 --channels-last --fuse-relu on")
        self.assertEqual(args, ["--model", "resnet50", "--batch", "128", "--channels-last", "--fuse-relu", "on",
                                "--optimizer", "sgd"])
        self.assertEqual(plan_calibration.allow_tf32("--model resnet50 --allow-tf32 none"), "none")
        self.assertEqual(plan_calibration.allow_tf32("--model resnet50 --amp bf16"), "cudnn")
        self.assertEqual(plan_calibration.precision("--model resnet50 --amp bf16"), "bf16")
        self.assertEqual(plan_calibration.precision("--model bert-base --batch 32"), "fp32")


class Committed(unittest.TestCase):
    def setUp(self):
        self.cal = json.load(open(COMMITTED))

    def test_it_is_the_fit_and_leave_one_out_of_its_pairs(self):
        pairs = [{k: p[k] for k in ("card", "tag", "record", "ms", "estimate", "allow_tf32", "precision", "features_ms")}
                 for p in self.cal["pairs"]]
        again = plan_calibration.evaluate(pairs)
        for k, v in self.cal["model"]["coefficients"].items():
            self.assertAlmostEqual(again["model"]["coefficients"][k], v, places=9, msg=k)
        for a, b in zip(again["pairs"], self.cal["pairs"]):
            self.assertAlmostEqual(a["loo_ms"], b["loo_ms"], places=6, msg=b["tag"])
        self.assertAlmostEqual(again["summary"]["median_relative_error"], self.cal["summary"]["median_relative_error"])

    def test_every_time_is_its_records_and_the_bar_is_met(self):
        for p in self.cal["pairs"]:
            points = json.load(open(os.path.join(ROOT, "reports", "results", "gpu", p["record"], "points.json")))
            self.assertEqual(p["ms"], float(points[p["tag"]]["oomlab"]["median_ms"]))
        self.assertGreaterEqual(self.cal["summary"]["configurations"], 10)
        self.assertLessEqual(self.cal["summary"]["median_relative_error"], 0.20)   # issue 52's bar


@unittest.skipUnless(os.path.exists(os.path.join(BUILD, "oomlab")), "needs the built oomlab (OOMLAB_BUILD_DIR)")
class OnTheRecords(unittest.TestCase):
    def test_the_committed_features_are_this_builds(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cal.json")
            subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plan_calibration.py"), "--build", BUILD,
                            "--out", out], check=True, capture_output=True)
            now = json.load(open(out))
        committed = json.load(open(COMMITTED))
        self.assertEqual([(p["card"], p["tag"]) for p in now["pairs"]],
                         [(p["card"], p["tag"]) for p in committed["pairs"]])
        for a, b in zip(now["pairs"], committed["pairs"]):
            for k, v in b["features_ms"].items():
                self.assertAlmostEqual(a["features_ms"][k], v, delta=1e-9 * max(1.0, v), msg=f"{b['tag']} {k}")


if __name__ == "__main__":
    unittest.main()
