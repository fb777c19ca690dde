"""test_gpu_rounds.py — the GPU kit's repeated pairs (scripts/gpu_rounds.py, gpu_run.sh's
OOMLAB_KIT_REPEAT) on the CPU machine: the paired ratio and its 95% interval as the report's
verdict rule computes it (experiments/runner/verdict_rule.cpp: the worked example with the
t table's df = 4 row that tests/test_verdict_rule.cpp holds the C++ to), issue 31's bar verdicts (met, not met, straddling, too few pairs), the
rounds found in a hand-made work folder and paired by round with PyTorch's twin (BERT's SDPA
run), gpu_report.py's points.json and README table, torch_bench.py's `run TAG ROUND` answer,
REPORT.md's GPU appendix line from a record's points.json, and issue 54's baselines (PyTorch's
best eager twin and torch.compile's, noisy rounds left out, the kit asking the twins the bars name).
Run: python3 -m unittest tests/test_gpu_rounds.py
"""
import json
import math
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))   # gpu_rounds (a kit script) and oomlab_report

import gpu_rounds  # noqa: E402


def results(ms):
    """An oomlab results document with a step-time median of `ms` milliseconds."""
    return {"metrics": {"step_time_s": {"median": ms / 1e3, "count": 20}}, "memory": {"totals": {}}}


class PairedRatio(unittest.TestCase):
    def test_the_interval_is_the_rules(self):
        d = 0.01   # logs -2d, -d, 0, d, 2d: mean 0, s = d * sqrt(2.5), half width t(4) * s / sqrt(5)
        a = [100 * math.exp(k * d) for k in (-2, -1, 0, 1, 2)]
        i = gpu_rounds.paired_ratio(a, [100.0] * 5)
        half = 2.776 * d * math.sqrt(2.5) / math.sqrt(5)
        self.assertTrue(i["enough"])
        self.assertAlmostEqual(i["estimate"], 1.0)
        self.assertAlmostEqual(i["lo"], math.exp(-half))
        self.assertAlmostEqual(i["hi"], math.exp(half))
        few = gpu_rounds.paired_ratio([90, 80], [100, 100])   # below 5 pairs: the observed range
        self.assertFalse(few["enough"])
        self.assertAlmostEqual(few["lo"], 0.8)
        self.assertAlmostEqual(few["hi"], 0.9)
        self.assertEqual(gpu_rounds.paired_ratio([], [])["n"], 0)

    def test_bar_verdicts(self):
        judge = gpu_rounds.judge_at_most
        self.assertEqual(judge(gpu_rounds.paired_ratio([85, 86, 84, 85, 86], [100] * 5), 0.90), "met")
        self.assertEqual(judge(gpu_rounds.paired_ratio([95, 96, 94, 95, 96], [100] * 5), 0.90), "not met")
        self.assertIn("straddles", judge(gpu_rounds.paired_ratio([80, 100, 85, 97, 90], [100] * 5), 0.90))
        self.assertIn("too few pairs: 2", judge(gpu_rounds.paired_ratio([80, 81], [100, 100]), 0.90))
        touching = {"estimate": 0.85, "lo": 0.80, "hi": 0.90, "n": 5, "enough": True}   # as judge_threshold:
        self.assertIn("straddles", judge(touching, 0.90))                                # the bar is not below hi


class Rounds(unittest.TestCase):
    def work(self, tmp, ours, theirs, twin, tag="bert_fp32"):
        """A kit work folder: round 1 in res/, rounds 2.. in res/rounds/<r>/, PyTorch's records."""
        res = Path(tmp) / "work" / "res"
        for r, ms in enumerate(ours, 1):
            d = res if r == 1 else res / "rounds" / str(r)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"oomlab_{tag}.json").write_text(json.dumps(results(ms)))
        lines = [{"tag": "_versions"}] + [{"tag": twin, "side": "torch", "median_ms": ms, "round": r}
                                          for r, ms in enumerate(theirs, 1)]
        (res / "torch.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
        for sub in ("tests", "logs"):
            (Path(tmp) / "work" / sub).mkdir()
        return Path(tmp) / "work"

    def test_pairs_by_round_with_the_bars_twin(self):
        with tempfile.TemporaryDirectory() as tmp:
            work = self.work(tmp, [60, 61, 59, 60, 62], [70, 70, 69, 71, 70], "bert_fp32_sdpa")
            out = Path(tmp) / "out"
            r = subprocess.run([sys.executable, str(ROOT / "scripts/gpu_report.py"), str(work), str(out)],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            rep = json.loads((out / "points.json").read_text())["bert_fp32"]["repeated"]
            self.assertEqual(rep["twin"], "bert_fp32_sdpa")
            self.assertEqual(rep["rounds"], [1, 2, 3, 4, 5])
            self.assertEqual(rep["ratio"]["n"], 5)
            self.assertAlmostEqual(rep["ratio"]["estimate"],
                                   math.exp(sum(math.log(a / b) for a, b in zip([60, 61, 59, 60, 62], [70, 70, 69, 71, 70])) / 5))
            self.assertEqual(rep["bar"], 0.9)
            self.assertEqual(rep["verdict"], "met")
            readme = (out / "README.md").read_text()
            self.assertIn("## Repeated pairs", readme)
            self.assertIn("| bert_fp32 | bert_fp32_sdpa | 5 | 60.0, 61.0, 59.0, 60.0, 62.0 |", readme)
            # REPORT.md's GPU appendix says so, from the record's points.json
            from oomlab_report.gpu_record import load_record
            from oomlab_report.gpu_section import ran_cell
            self.assertIn("1 configuration repeated in up to 5 rounds against PyTorch (verdicts: met)",
                          ran_cell(load_record(out)))

    def test_fused_and_next_bert_rows_are_judged_against_sdpa(self):
        for tag, twin in (("bert_fp32_fused", "bert_fp32_sdpa"), ("bert_tf32_fused", "bert_tf32_sdpa"),
                          ("bert_bf16_fused", "bert_bf16_sdpa"), ("bert_fp32_next", "bert_fp32_sdpa"),
                          ("bert_bf16_fused_mma", "bert_bf16_sdpa")):
            with tempfile.TemporaryDirectory() as tmp:
                work = self.work(tmp, [60, 61, 59, 60, 62], [70, 70, 69, 71, 70], twin, tag=tag)
                torch = {twin: {r: {"median_ms": ms} for r, ms in enumerate([70, 70, 69, 71, 70], 1)}}
                rep = gpu_rounds.collect(work / "res", torch)[tag]
                self.assertEqual((rep["twin"], rep["bar"], rep["ratio"]["n"]), (twin, 0.90, 5), tag)
                self.assertEqual(rep["verdict"], "met", tag)   # 0.86 (0.84-0.88) under 0.90

    def test_a_round_without_its_twin_is_left_out(self):
        with tempfile.TemporaryDirectory() as tmp:
            work = self.work(tmp, [60, 61, 59], [70, 70], "bert_fp32_sdpa")
            torch = {"bert_fp32_sdpa": {1: {"median_ms": 70}, 2: {"median_ms": 70}}}
            rep = gpu_rounds.collect(work / "res", torch)["bert_fp32"]
            self.assertEqual(rep["rounds"], [1, 2])
            self.assertIn("too few pairs: 2", rep["verdict"])
            self.assertEqual(gpu_rounds.collect(work / "res", {}), {"bert_fp32": dict(
                rep, rounds=[], oomlab_ms=[], torch_ms=[], ratio=gpu_rounds.paired_ratio([], []),
                verdict="inconclusive (too few pairs: 0 of 5)")})


class Issue54Baselines(unittest.TestCase):
    """Issue 54's bars: the same rounds against PyTorch's best eager twin (TAG@best), torch.compile's
    ratio beside it unjudged, noisy rounds (p90/p10 > 1.3 on either side) left out."""

    def test_best_and_compile_twins_with_a_noisy_round(self):
        with tempfile.TemporaryDirectory() as tmp:
            work = Rounds.work(self, tmp, [80, 81, 79, 80, 82, 80], [100] * 6, "r50_bf16", tag="r50_bf16")
            best = {r: {"median_ms": 100.0, "p10_ms": 99.0, "p90_ms": 101.0} for r in range(1, 7)}
            best[6] = {"median_ms": 100.0, "p10_ms": 90.0, "p90_ms": 130.0}   # 1.44: noisy
            compiled = {r: {"median_ms": 75.0} for r in range(1, 7)}
            rep = gpu_rounds.collect(work / "res", {"r50_bf16@best": best, "r50_bf16@compile": compiled})["r50_bf16"]
            b = rep["against_best"]
            self.assertEqual((b["twin"], b["bar"], b["rounds"], b["noisy_rounds"]), ("r50_bf16@best", 0.90,
                                                                                    [1, 2, 3, 4, 5], [6]))
            self.assertEqual(b["verdict"], "met")   # 0.80 (0.79-0.82) under 0.90
            c = rep["against_compile"]
            self.assertEqual((c["twin"], c["ratio"]["n"]), ("r50_bf16@compile", 6))
            self.assertNotIn("verdict", c)          # reported beside, not judged
            self.assertAlmostEqual(c["ratio"]["estimate"], math.exp(sum(
                math.log(a / 75.0) for a in [80, 81, 79, 80, 82, 80]) / 6))
            lines = "\n".join(gpu_rounds.readme_lines({"r50_bf16": rep}))
            self.assertIn("| r50_bf16 | r50_bf16@best | 5 + 1 noisy |", lines)
            self.assertIn("| r50_bf16 | r50_bf16@compile | 6 |", lines)

    def test_a_noisy_oomlab_side_leaves_its_round_out(self):
        with tempfile.TemporaryDirectory() as tmp:
            work = Rounds.work(self, tmp, [80, 80], [100, 100], "r50_bf16", tag="r50_bf16")
            doc = json.loads((work / "res" / "oomlab_r50_bf16.json").read_text())
            doc["metrics"]["step_time_s"].update(p10=0.070, p90=0.100)   # 1.43
            (work / "res" / "oomlab_r50_bf16.json").write_text(json.dumps(doc))
            best = {r: {"median_ms": 100.0} for r in (1, 2)}
            b = gpu_rounds.collect(work / "res", {"r50_bf16@best": best})["r50_bf16"]["against_best"]
            self.assertEqual((b["rounds"], b["noisy_rounds"]), ([2], [1]))

    def test_the_kit_asks_the_twins_the_bars_name(self):
        text = (ROOT / "scripts" / "gpu_run.sh").read_text()
        block = text[text.index("declare -A BEST=("):]
        block = block[:block.index(")\n")]
        pairs = dict(re.findall(r"\[(\w+)\]=(\S+)", block))
        self.assertEqual(pairs, {tag: twin for tag, (twin, _) in gpu_rounds.ISSUE54_BARS.items()})

    def test_torch_bench_best_is_the_issues_configuration(self):
        import torch_bench   # no PyTorch import at module level
        eff = {t: torch_bench.effective(t) for t in ("r50_bf16@best", "r50_tf32@best", "bert_fp32@best",
                                                   "bert_fp32", "r50_fp16@compile")}
        # (channels_last, optimizer kwargs, attention, baseline)
        self.assertEqual([(e[8], e[9], e[5], e[10]) for e in eff.values()], [
            (True, {"foreach": True}, "", "best"), (False, {"foreach": True}, "", "best"),
            (False, {"fused": True}, "sdpa", "best"), (False, {}, "eager", "eager"),
            (True, {"foreach": True}, "", "compile")])
        self.assertTrue(torch_bench.known("graph_gpt2_tf32@best"))
        self.assertFalse(torch_bench.known("r50_bf16@fastest"))
        self.assertFalse(torch_bench.known("r50_bf16_cudagraphs@best"))   # its capture is eager PyTorch's
        self.assertIn("unknown config", torch_bench.guarded(None, "r50_bf16@fastest")["error"])


class TorchBenchRound(unittest.TestCase):
    def test_run_tag_round_carries_the_round(self):
        r = subprocess.run([sys.executable, str(ROOT / "scripts/torch_bench.py"), "--serve", "--dry-run"],
                           input="run r50_tf32 3\nrun r50_tf32\nquit\n", capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        answers = [json.loads(x) for x in r.stdout.splitlines()][1:]
        self.assertEqual(answers[0]["round"], 3)
        self.assertNotIn("round", answers[1])


if __name__ == "__main__":
    unittest.main()
