"""test_readme_figures.py — scripts/check_readme_figures.py: a README figure that its results
file does not hold fails, one it holds (at the printed precision, after the unit's scaling)
passes; integers without a unit, names, versions and code are not figures. Planted folders:
an experiment README and its results file, a top README whose sentence names the experiment,
and a benchmarks README beside its JSON records; then the committed READMEs pass.
Run: python3 -m unittest tests/test_readme_figures.py
"""
import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import check_readme_figures as crf  # noqa: E402

RESULTS = {"experiment": "99_planted",
           "source": {"memory_mb": [10972, 3944], "citation": "the source's table: 8-35% faster"},
           "summary": {"split_over_uncapped": 2.8813, "peak_bytes": 11801123456, "accuracy": 0.9355,
                       "step_s": 0.2077, "history": [0.77] * 40},
           "verdict": {"status": "confirmed", "reason": "split 2.88x of uncapped; DP/DDP 0.94x (95% CI 0.80-1.11)"}}


def check(text, own="99"):
    numbers = crf.result_numbers(RESULTS)
    return [fig for _, fig in crf.check_text(text, lambda nn: numbers if nn == "99" else None, own)]


class Figures(unittest.TestCase):
    def test_a_wrong_figure_fails_and_the_right_one_passes(self):
        self.assertEqual(check("Split took 0.77x of the uncapped run's time."), ["0.77x"])   # a loss history's value
        self.assertEqual(check("Split took 2.88x of the uncapped run's time."), [])
        self.assertEqual(check("DDP 1.08x faster."), ["1.08x"])
        self.assertEqual(check("DDP took 1.08x. DP took 2.88x."), ["1.08x"])   # a ratio ending a sentence
        self.assertEqual(check("DP/DDP 0.94x (95% CI 0.80-1.11)."), [])

    def test_units_scale(self):
        self.assertEqual(check("It peaks at 10.99 GiB (11.80 GB), 93.55% accurate, 207.7 ms a step."), [])
        self.assertEqual(check("It peaks at 10.98 GiB."), ["10.98 GiB"])
        self.assertEqual(check("It reached 93.48% accuracy."), ["93.48%"])
        self.assertEqual(check("A step takes 0.208 s, or 0.21 s."), [])
        self.assertEqual(check("The source: 10972 MB -> 3944 MB; 8-35% faster."), [])
        self.assertEqual(check("Split took +188.1% time."), [])   # a signed percentage: the ratio 2.8813 as a change
        self.assertEqual(check("Split took 188.1% of the time."), ["188.1%"])   # unsigned: a fraction, not a change
        self.assertEqual(check("The source: 10972 MB -> 3945 MB."), ["3945 MB"])

    def test_what_is_not_a_figure(self):
        text = ("ResNet-50 at batch 128, 3 seeds, 20 steps, 11 points on a V100 in bf16 (T9.7, sec. 4.1), "
                "3x224x224 images, 16x2 accumulation, commit 86c8535 on 2026-11-27, PyTorch 2.15.0 and "
                "PyTorch 2.11, a 2-10x bar, tolerance 1e-5, `--lr 0.025` (see "
                "[the file](../x/0.33.md)), <https://example.org/1.23>.\n\n    indented 4.56 code\n")
        self.assertEqual(check(text), [])

    def test_a_range_or_an_error_lends_its_unit(self):
        self.assertEqual(check("Accuracy 93.55 ± 0.16%."), ["0.16%"])
        self.assertEqual(check("Between 0.80-1.11x."), [])
        self.assertEqual(check("Between 0.81-1.11x."), ["0.81"])

    def test_other_files_are_checked_by_the_sentence_naming_one_experiment(self):
        text = ("The committed `99` reached 93.48% accuracy; other runs took 33 min. "
                "Experiment 98 took 7.25 s. Experiments 99_planted and 98_other: 1.23x.")
        self.assertEqual([fig for fig in check(text, own=None)], ["93.48%"])


class CommandLine(unittest.TestCase):
    def run_check(self, readme, top=None):
        with tempfile.TemporaryDirectory() as tmp:
            exps, results = Path(tmp) / "experiments", Path(tmp) / "results"
            (exps / "99_planted").mkdir(parents=True)
            results.mkdir()
            (exps / "99_planted" / "README.md").write_text(readme)
            (results / "99_planted.json").write_text(json.dumps(RESULTS))
            files = [exps / "99_planted" / "README.md"]
            if top is not None:
                (Path(tmp) / "README.md").write_text(top)
                files.append(Path(tmp) / "README.md")
            return subprocess.run([sys.executable, str(ROOT / "scripts/check_readme_figures.py"), "--experiments",
                                   str(exps), "--results", str(results), *map(str, files)],
                                  capture_output=True, text=True, timeout=60)

    def test_a_planted_readme_with_a_wrong_figure_fails(self):
        r = self.run_check("# 99\n\nSplit took 0.77x of the uncapped run (a shared VM).\n")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("README.md:3: '0.77x' is in no number of results/99_planted.json", r.stdout)
        r = self.run_check("# 99\n\nSplit took 2.88x of the uncapped run.\n", top="In `99`, 93.48% of it.\n")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("README.md:1: '93.48%' is in no number of the results of the experiment its sentence names",
                      r.stdout)

    def test_a_planted_readme_with_the_right_figures_passes(self):
        r = self.run_check("# 99\n\nSplit took 2.88x of the uncapped run; 93.55% accurate.\n",
                           top="In `99`, 93.55% of it.\n")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("2/2 files state only figures their results hold", r.stdout)

    def test_the_benchmarks_readme_is_checked_against_every_json_beside_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            bench = Path(tmp) / "benchmarks"
            bench.mkdir()
            (bench / "a_vs_torch.json").write_text(json.dumps({"results": [{"ratio_median": 0.7912}]}))
            (bench / "b_bench.json").write_text(json.dumps({"benchmarks": [{"real_time": 12.5}]}))
            (bench / "notes.txt").write_text("1.048")   # only JSON files count

            def run(text):
                (bench / "README.md").write_text(text)
                return subprocess.run([sys.executable, str(ROOT / "scripts/check_readme_figures.py"), "--benchmarks",
                                       str(bench), str(bench / "README.md")], capture_output=True, text=True,
                                      timeout=60)
            r = run("resnet20 0.79x; the conv took 12.5 ms.\n")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = run("resnet20 0.79x, resnet18 1.048x.\n")
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertIn("README.md:1: '1.048x' is in no number of the JSON files beside it", r.stdout)

    def test_the_committed_readmes_pass(self):
        r = subprocess.run([sys.executable, str(ROOT / "scripts/check_readme_figures.py")], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
