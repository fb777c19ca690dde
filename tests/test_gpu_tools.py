"""test_gpu_tools.py — the GPU session's scripts, checked on the CPU machine (CI).

scripts/trace_breakdown.py on a real `oomlab train --device meta --chrome-trace` file,
scripts/gpu_compare.py on a real oomlab results JSON next to hand-made PyTorch ones
(ratios oomlab / PyTorch, points kept when one side is missing, atomic comparison.json),
and scripts/torch_reference.py's input errors (exit 2, one line, no JSON), which need no
torch. The GPU runs themselves need a GPU (scripts/gpu_run.sh).
Run: python3 -m unittest tests/test_gpu_tools.py  (OOMLAB_BUILD_DIR: the build with oomlab)
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OOMLAB = ROOT / os.environ.get("OOMLAB_BUILD_DIR", "build") / "oomlab"


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def oomlab_meta_run(tmp, model, extra=()):
    out = Path(tmp) / f"{model}.json"
    trace = Path(tmp) / f"{model}_trace.json"
    r = run(OOMLAB, "train", "--model", model, "--device", "meta", "--batch", "4", "--steps", "2",
            "--synthetic-size", "8", "--eval-batches", "0", "--quiet", "--json", out,
            "--chrome-trace", trace, *extra)
    if r.returncode != 0:
        raise AssertionError(f"oomlab failed: {r.stdout}{r.stderr}")
    return out, trace


@unittest.skipUnless(OOMLAB.exists(), f"{OOMLAB} not built")
class TraceBreakdown(unittest.TestCase):
    def test_resnet_spans_are_attributed_to_ops(self):
        with tempfile.TemporaryDirectory() as tmp:
            _, trace = oomlab_meta_run(tmp, "resnet18", ("--dataset", "synthetic", "--input", "3,32,32"))
            r = run(sys.executable, "scripts/trace_breakdown.py", trace, "--top", "3")
            self.assertEqual(r.returncode, 0, r.stderr)
            ops = {line.split()[0] for line in r.stdout.splitlines()[1:] if line and not line.startswith(" ")}
            for op in ("conv2d", "batch_norm", "relu_", "linear", "max_pool2d"):
                self.assertIn(op, ops, r.stdout)
            self.assertEqual(sum(1 for line in r.stdout.splitlines() if line.startswith("  ")), 3)

    def test_bad_files_exit_2_with_one_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            empty = Path(tmp) / "empty.json"
            empty.write_text('{"traceEvents": []}')
            broken = Path(tmp) / "broken.json"
            broken.write_text('{"traceEv')
            for path in (Path(tmp) / "missing.json", empty, broken):
                r = run(sys.executable, "scripts/trace_breakdown.py", path)
                self.assertEqual(r.returncode, 2, path)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn("trace_breakdown: error:", r.stderr)


def torch_doc(step_s, peak):
    return {"schema_version": 2, "command": "torch_reference", "context": {"framework": "pytorch"},
            "config": {}, "metrics": {"step_time_s": {"median": step_s, "p10": step_s, "p90": step_s,
                                                      "mean": step_s, "count": 3}},
            "memory": {"devices": {"cuda:0": {"allocated_bytes.all.peak": peak}},
                       "totals": {"allocated_bytes.all.peak": peak}}}


@unittest.skipUnless(OOMLAB.exists(), f"{OOMLAB} not built")
class GpuCompare(unittest.TestCase):
    def test_ratios_are_oomlab_over_pytorch_and_no_point_is_lost(self):
        with tempfile.TemporaryDirectory() as tmp:
            ours, _ = oomlab_meta_run(tmp, "mlp", ("--dataset", "synthetic"))
            doc = json.loads(ours.read_text())
            step = doc["metrics"]["step_time_s"]["median"]
            peak = doc["memory"]["totals"]["allocated_bytes.all.peak"]
            self.assertGreater(step, 0)
            self.assertGreater(peak, 0)
            res = Path(tmp) / "results"
            res.mkdir()
            (res / "oomlab_mlp_b4_tf32-none.json").write_text(ours.read_text())
            (res / "torch_eager_mlp_b4_tf32-none.json").write_text(json.dumps(torch_doc(2 * step, 4 * peak)))
            (res / "torch_eager_bert-base_b32_tf32-all.json").write_text(json.dumps(torch_doc(0.1, 1 << 30)))
            r = run(sys.executable, "scripts/gpu_compare.py", res)
            self.assertEqual(r.returncode, 0, r.stderr)
            comp = json.loads((res / "comparison.json").read_text())
            points = {p["tag"]: p for p in comp["points"]}
            self.assertAlmostEqual(points["mlp_b4_tf32-none"]["step_time_ratio_vs_eager"], 0.5)
            self.assertAlmostEqual(points["mlp_b4_tf32-none"]["peak_allocated_ratio"], 0.25)
            self.assertIsNone(points["bert-base_b32_tf32-all"]["oomlab_step_s"])   # oomlab failed there
            self.assertAlmostEqual(points["bert-base_b32_tf32-all"]["torch_eager_step_s"], 0.1)
            self.assertIn("no usable oomlab result", r.stderr)
            self.assertFalse(any(p.name.endswith(".tmp") for p in res.iterdir()))


class TorchReferenceInput(unittest.TestCase):
    def test_bad_input_exits_2_and_writes_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "t.json"
            cases = [("--model", "resnet18", "--batch", "0"), ("--model", "nope", "--batch", "4"),
                     ("--model", "bert-tiny", "--batch", "4", "--classes", "0"),
                     ("--model", "resnet18", "--batch", "4", "--input", "3,x,4"),
                     ("--model", "resnet18", "--batch", "4", "--bogus-flag")]
            for args in cases:
                r = run(sys.executable, "scripts/torch_reference.py", *args, "--json", out)
                self.assertEqual(r.returncode, 2, (args, r.stderr))
                self.assertIn("torch_reference: error:", r.stderr, args)
                self.assertFalse(out.exists(), args)


if __name__ == "__main__":
    unittest.main()


class TorchSideBySideScripts(unittest.TestCase):
    """scripts/torch_parity.py and scripts/cpu_vs_torch.py without PyTorch (as CI runs them):
    usage errors exit 2 with one line; a machine without torch is a clear skip (exit 0)."""

    def test_usage_errors_exit_2(self):
        for script, args in (("torch_parity.py", ["--models", "resnet99"]), ("torch_parity.py", ["--dtypes", "float16"]),
                             ("cpu_vs_torch.py", ["--models", "vgg99"]), ("cpu_vs_torch.py", ["--rounds", "0"])):
            r = run(sys.executable, ROOT / "scripts" / script, *args)
            self.assertEqual(r.returncode, 2, f"{script} {args}: {r.stdout}{r.stderr}")
            self.assertIn("error:", r.stderr)

    def test_without_torch_they_skip_with_a_message(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed here: the scripts run for real")
        except ImportError:
            pass
        for script in ("torch_parity.py", "cpu_vs_torch.py"):
            r = run(sys.executable, ROOT / "scripts" / script)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("skipped", r.stdout)
