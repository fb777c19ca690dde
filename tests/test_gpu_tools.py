"""test_gpu_tools.py — the GPU session's scripts, checked on the CPU machine (CI).

scripts/trace_breakdown.py on a real `oomlab train --device meta --chrome-trace` file,
the GPU kit: scripts/gpu_report.py on a hand-made work folder around a real oomlab results
file (ratios, points kept when one side is missing or failed, at most 8 files) and, with no
binary, around the committed GPU record's results: its provenance.json passes check_results'
GPU-record check (and fails it for an unrecorded date, a dirty kit, a dry run),
scripts/fatbin_archs.py, torch_bench.py and
torch_reference.py's input errors (exit 2, one line), which need no torch. The GPU runs
themselves need a GPU (scripts/gpu_run.sh on a lent machine); the kit end to end without one
is tests/test_gpu_kit.py.
Run: python3 -m unittest tests/test_gpu_tools.py  (OOMLAB_BUILD_DIR: the build with oomlab)
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OOMLAB = ROOT / os.environ.get("OOMLAB_BUILD_DIR", "build") / "oomlab"
sys.path.insert(0, str(ROOT / "scripts"))   # oomlab_report, for the GPU-record check


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
            # --skip-steps 1 keeps the second of the two steps: half the spans of each op
            counts = {}
            for args in ((), ("--skip-steps", "1")):
                out = run(sys.executable, "scripts/trace_breakdown.py", trace, *args).stdout
                counts[args] = {l.split()[0]: int(l.split()[-1]) for l in out.splitlines()[1:]
                                if l and not l.startswith((" ", "all", "longest"))}
            self.assertEqual({op: 2 * n for op, n in counts[("--skip-steps", "1")].items()}, counts[()])
            r = run(sys.executable, "scripts/trace_breakdown.py", trace, "--skip-steps", "2")
            self.assertEqual(r.returncode, 2)
            self.assertIn("cannot skip 2", r.stderr)

    def test_the_attention_cores_forward_is_split_by_op(self):
        # the composed attention records a span per step inside the core's (engine/ops/attention.cpp)
        with tempfile.TemporaryDirectory() as tmp:
            _, trace = oomlab_meta_run(tmp, "bert-mini", ("--dataset", "synthetic-seq", "--seq-len", "16"))
            names = {e["name"] for e in json.loads(Path(trace).read_text())["traceEvents"] if e.get("ph") == "X"}
            for op in ("reshape", "bmm", "masked_softmax", "dropout"):
                self.assertIn(f"bert.encoder.layer.0.attention.self.core/{op}/fwd", names)
            out = run(sys.executable, "scripts/trace_breakdown.py", trace, "--skip-steps", "1").stdout
            rows = {l.split()[0]: l.split() for l in out.splitlines()[1:] if l and not l.startswith((" ", "all", "longest"))}
            layers = sum(1 for n in names if n.endswith(".attention.self.core/fwd"))
            self.assertEqual(int(rows["masked_softmax"][-1]), 2 * layers)   # one forward, one backward span each

    def test_device_time_is_used_where_the_trace_has_it(self):
        spans = [{"name": "conv1/fwd", "ph": "X", "ts": 0, "dur": 900, "args": {"device_us": 300}},
                 {"name": "conv1/conv2d/bwd", "ph": "X", "ts": 1000, "dur": 50, "args": {"device_us": 700}},
                 {"name": "allreduce", "ph": "X", "ts": 1100, "dur": 40, "tid": 1}]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.json"
            path.write_text(json.dumps({"traceEvents": spans}))
            out = run(sys.executable, "scripts/trace_breakdown.py", path).stdout
            row = next(l.split() for l in out.splitlines() if l.startswith("conv2d"))
            self.assertEqual(row[1:3], ["0.30", "0.70"])   # device time, forward and backward
            self.assertIn("device time (CUDA events), each span's own time (1 spans without device time left out)", out)
            host = run(sys.executable, "scripts/trace_breakdown.py", path, "--clock", "host").stdout
            row = next(l.split() for l in host.splitlines() if l.startswith("conv2d"))
            self.assertEqual(row[1:3], ["0.90", "0.05"])
            path.write_text(json.dumps({"traceEvents": spans[2:]}))
            r = run(sys.executable, "scripts/trace_breakdown.py", path, "--clock", "device")
            self.assertEqual(r.returncode, 2)
            self.assertIn("no span carries device time", r.stderr)

    def test_nested_spans_count_once_and_recomputation_apart(self):
        # step 1: a probe forward (checkpointing's), then forward, then a backward span that
        # recomputes conv1 (nested); step 2 the same without the probe. Host times in us.
        def step(t0, probe):
            ev = [{"name": "conv1/fwd", "ph": "X", "ts": t0, "dur": 100}] if probe else []
            t0 += 200 if probe else 0
            return ev + [{"name": "conv1/fwd", "ph": "X", "ts": t0, "dur": 100},
                         {"name": "relu/fwd", "ph": "X", "ts": t0 + 100, "dur": 10},
                         {"name": "relu/relu_/bwd", "ph": "X", "ts": t0 + 200, "dur": 300},
                         {"name": "conv1/fwd", "ph": "X", "ts": t0 + 250, "dur": 120},
                         {"name": "conv1/conv2d/bwd", "ph": "X", "ts": t0 + 600, "dur": 400}]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.json"
            path.write_text(json.dumps({"traceEvents": step(0, True) + step(5000, False)}))
            def rows(*args):
                out = run(sys.executable, "scripts/trace_breakdown.py", path, *args).stdout
                self.assertIn("recomp ms", out.splitlines()[0])
                return out, {l.split()[0]: l.split()[1:4] + [l.split()[-1]] for l in out.splitlines()[1:]
                             if l and not l.startswith((" ", "all", "longest"))}
            out, r = rows()
            # relu's backward span holds conv1's recomputation: 300 - 120 of its own
            self.assertEqual(r["relu_"], ["0.02", "0.36", "0.00", "4"])
            self.assertEqual(r["conv2d"], ["0.30", "0.80", "0.24", "7"])
            self.assertIn("1.72 ms host time, each span's own time", out)   # the top-level spans' sum
            _, r = rows("--skip-steps", "1")   # the probe belongs to step 1
            self.assertEqual(r["conv2d"], ["0.10", "0.40", "0.12", "3"])
            with tempfile.TemporaryDirectory() as tmp2:   # a real checkpointed run (meta)
                _, trace = oomlab_meta_run(tmp2, "resnet18", ("--dataset", "synthetic", "--input", "3,32,32",
                                                              "--checkpoint", "all"))
                out = run(sys.executable, "scripts/trace_breakdown.py", trace, "--skip-steps", "1").stdout
                self.assertIn("recomp ms", out.splitlines()[0])

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


def gtest_json(passed, failed, skipped):
    tests = [{"name": f"P{i}", "status": "RUN", "result": "COMPLETED"} for i in range(passed)]
    tests += [{"name": f"F{i}", "status": "RUN", "result": "COMPLETED",
               "failures": [{"failure": "x.cpp:1\nExpected equality"}]} for i in range(failed)]
    tests += [{"name": f"S{i}", "status": "RUN", "result": "SKIPPED"} for i in range(skipped)]
    return {"tests": len(tests), "testsuites": [{"name": "Suite", "testsuite": tests}]}


@unittest.skipUnless(OOMLAB.exists(), f"{OOMLAB} not built")
class GpuReport(unittest.TestCase):
    """scripts/gpu_report.py on a hand-made work folder around a real oomlab results file."""

    def test_tables_ratios_and_at_most_eight_files(self):
        with tempfile.TemporaryDirectory() as tmp:
            ours, _ = oomlab_meta_run(tmp, "mlp", ("--dataset", "synthetic"))
            doc = json.loads(ours.read_text())
            step_ms = 1e3 * doc["metrics"]["step_time_s"]["median"]
            peak = doc["memory"]["totals"]["allocated_bytes.all.peak"]
            work, out = Path(tmp) / "work", Path(tmp) / "out"
            for d in ("res", "tests", "logs"):
                (work / d).mkdir(parents=True)
            (work / "res" / "manifest.json").write_text(json.dumps({"commit": "abc", "dirty": False, "sm": "90"}))
            (work / "res" / "nvidia_smi.csv").write_text("NVIDIA H100 80GB HBM3, 580.159.04, 9.0, 81559 MiB\n")
            with_choices = dict(doc, kernel_choices=[   # as a CUDA run's results list them
                {"frame": "l1/fwd", "op": "conv2d_forward", "choice": "cuDNN GEMM FMA_MATH", "calls": 2},
                {"frame": "l2/fwd", "op": "conv2d_forward", "choice": "cuDNN GEMM FMA_MATH", "calls": 3}])
            (work / "res" / "oomlab_mlp.json").write_text(json.dumps(with_choices))
            (work / "res" / "meta_mlp.json").write_text(ours.read_text())
            slower = json.loads(ours.read_text())   # a *_next row (gpu_run.sh NEXT) beside its default
            slower["metrics"]["step_time_s"]["median"] *= 1.25
            (work / "res" / "oomlab_mlp_next.json").write_text(json.dumps(slower))
            faster = json.loads(ours.read_text())   # a *_graph row (gpu_run.sh GRAPH) beside its default
            faster["metrics"]["step_time_s"]["median"] *= 0.8
            (work / "res" / "oomlab_mlp_graph.json").write_text(json.dumps(faster))
            (work / "res" / "oomlab_mlp_cudagraphs.json").write_text(json.dumps(faster))   # --cuda-graphs
            (work / "res" / "torch.jsonl").write_text("\n".join(json.dumps(r) for r in (
                {"tag": "_versions", "torch": "2.11"}, {"tag": "mlp", "median_ms": 2 * step_ms, "peak_allocated": 4 * peak},
                {"tag": "bert_tf32_sdpa", "median_ms": 30.0, "peak_allocated": 1 << 30},
                {"tag": "vgg16_tf32", "error": "CUDA out of memory"},
                {"tag": "mlp", "side": "torch", "profile": "/tmp/x.txt"})) + "\n")   # no measurement
            (work / "tests" / "test_a.json").write_text(json.dumps(gtest_json(3, 1, 2)))
            (work / "tests" / "rc.txt").write_text("test_a rc=1 12s\ntest_b rc=124 150s\nsanitizer_memcheck rc=0 80s\n")
            (work / "logs" / "sanitizer_memcheck.log").write_text("[       OK ] A.B\n========= ERROR SUMMARY: 0 errors\n")
            (work / "run.log").write_text("[1s] preflight ok\n[300s] skipped: par_dp (budget)\n")
            r = run(sys.executable, "scripts/gpu_report.py", work, out)
            self.assertEqual(r.returncode, 0, r.stderr)
            files = sorted(p.name for p in out.iterdir())
            self.assertLessEqual(len(files), 8, files)
            self.assertEqual(files, ["README.md", "points.json", "provenance.json", "tests.json"])
            pts = json.loads((out / "points.json").read_text())
            self.assertAlmostEqual(pts["mlp"]["time_ratio_oomlab_over_torch"], 0.5)
            self.assertAlmostEqual(pts["mlp"]["peak_ratio_oomlab_over_torch"], 0.25)
            self.assertAlmostEqual(pts["mlp"]["meta_over_cuda_peak"], 1.0)
            self.assertEqual(pts["mlp"]["oomlab"]["kernel_choices"], {"conv2d_forward: cuDNN GEMM FMA_MATH": 5})
            self.assertIsNone(pts["bert_tf32_sdpa"]["oomlab"])             # PyTorch-only point kept
            self.assertEqual(pts["mlp_next"]["default_tag"], "mlp")
            self.assertAlmostEqual(pts["mlp_next"]["time_ratio_next_over_default"], 1.25)
            self.assertAlmostEqual(pts["mlp_next"]["peak_ratio_next_over_default"], 1.0)
            self.assertEqual(pts["mlp_graph"]["default_tag"], "mlp")
            self.assertAlmostEqual(pts["mlp_graph"]["time_ratio_next_over_default"], 0.8)
            self.assertAlmostEqual(pts["mlp_cudagraphs"]["time_ratio_next_over_default"], 0.8)
            self.assertAlmostEqual(pts["mlp_cudagraphs"]["time_ratio_next_over_torch"], 0.4)   # the default's twin
            self.assertNotIn("default_tag", pts["mlp"])
            self.assertIn("error", pts["vgg16_tf32"]["torch"])               # a failure is kept, not dropped
            t = json.loads((out / "tests.json").read_text())
            self.assertEqual((t["binaries"]["test_a"]["passed"], t["binaries"]["test_a"]["failed"],
                              t["binaries"]["test_a"]["skipped"]), (3, 1, 2))
            self.assertIn("note", t["binaries"]["test_b"])                   # cut off: no report, said so
            self.assertEqual(t["sanitizers"]["memcheck"]["summary"], "ERROR SUMMARY: 0 errors")
            readme = (out / "README.md").read_text()
            for text in ("NVIDIA H100 80GB HBM3", "Suite.F0", "par_dp (budget)", "0.50",
                         "- mlp: conv2d_forward: cuDNN GEMM FMA_MATH x5", "Switched GPU paths beside the default",
                         "| mlp_next | ", "| mlp_graph | ", "| mlp_cudagraphs | "):
                self.assertIn(text, readme)
            self.assertEqual(json.loads((out / "provenance.json").read_text())["machine"]["compute_capability"], "9.0")


GPU_RECORD = ROOT / "reports/results/gpu/h100-2026-11-25"
SHA_518 = "518c647d9a85c41bda0c9e5695cb151cc823b629"   # the record's commit, in this history


def kit_work(top, started_at="2026-11-25T20:00:00Z", dirty=False):
    """A kit work folder (what gpu_run.sh leaves for gpu_report.py) around one of the committed
    record's oomlab results (run1, made at SHA_518 from a clean tree): no binary needed."""
    work = Path(top) / "work"
    res = work / "res"
    res.mkdir(parents=True)
    oomlab = (GPU_RECORD / "run1/res/oomlab_r50_fp32.json").read_text()
    (res / "manifest.json").write_text(json.dumps({"commit": SHA_518, "dirty": dirty, "sm": "90",
                                                   "packed_at": "2026-11-25T18:00:00+00:00", "nvcc": "V13.0.88"}))
    (res / "nvidia_smi.csv").write_text("NVIDIA H100 80GB HBM3, 580.159.04, 9.0, 81559 MiB\n")
    (res / "provenance_run.json").write_text(oomlab)
    (res / "oomlab_r50_fp32.json").write_text(oomlab)
    (res / "torch_versions.json").write_text(json.dumps({"tag": "_versions", "torch": "2.11.0+cu130", "cuda": "13.0",
                                                         "cudnn": 91900, "nccl": "2.28.9"}))
    if started_at:
        (res / "started_at").write_text(started_at + "\n")
    return work


def in_history(sha):
    return subprocess.run(["git", "merge-base", "--is-ancestor", sha, "HEAD"], cwd=ROOT,
                          capture_output=True).returncode == 0


@unittest.skipUnless(GPU_RECORD.is_dir() and in_history(SHA_518), "the committed GPU record or its commit is not here")
class KitProvenance(unittest.TestCase):
    """The kit's provenance.json (scripts/gpu_report.py) passes check_results' GPU-record check
    (oomlab_report/provenance.py) when the run recorded everything, and fails it, saying why,
    when the date is not recorded, the kit was dirty or the run was a dry run."""

    def report(self, work, top):
        out = Path(top) / "results" / "gpu" / "kit-run"
        r = run(sys.executable, "scripts/gpu_report.py", work, out)
        self.assertEqual(r.returncode, 0, r.stderr)
        return out, json.loads((out / "provenance.json").read_text())

    def test_a_kit_record_passes_the_gpu_record_check(self):
        from oomlab_report.provenance import gpu_record_problems
        with tempfile.TemporaryDirectory() as top:
            out, prov = self.report(kit_work(top), top)
            self.assertEqual((prov["commit"], prov["dirty"], prov["date"]), (SHA_518, False, "2026-11-25"))
            self.assertEqual(prov["started_at"], "2026-11-25T20:00:00Z")   # orders records of one day
            self.assertEqual(prov["machine"]["gpu"], "NVIDIA H100 80GB HBM3")
            self.assertEqual(prov["machine"]["driver"], "580.159.04")
            self.assertEqual(prov["machine"]["cuda_runtime"], "13.0")
            self.assertEqual(prov["oomlab_git"], SHA_518[:12])
            self.assertEqual(gpu_record_problems(out, ROOT), [])
            r = run(sys.executable, "scripts/check_results.py", out.parent.parent)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertIn("1/1 GPU records valid", r.stdout)

    def test_the_date_falls_back_to_oomlab_context_and_is_never_invented(self):
        from oomlab_report.provenance import gpu_record_problems
        with tempfile.TemporaryDirectory() as top:
            work = kit_work(top, started_at=None)
            out, prov = self.report(work, top)
            self.assertEqual(prov["date"], "2026-11-25")   # the oomlab results' context.date
            self.assertNotIn("started_at", prov)
            self.assertIn("context.date", prov["date_source"])
            for f in ("provenance_run.json", "oomlab_r50_fp32.json"):
                (work / "res" / f).unlink()
            out, prov = self.report(work, top)
            self.assertNotIn("date", prov)
            problems = gpu_record_problems(out, ROOT)
        self.assertTrue(any(p.startswith("no `date` (YYYY-MM-DD) of the run: not recorded") for p in problems),
                        problems)

    def test_a_dirty_kit_or_a_dry_run_fails(self):
        from oomlab_report.provenance import gpu_record_problems
        with tempfile.TemporaryDirectory() as top:
            work = kit_work(top, dirty=True)
            out, _ = self.report(work, top)
            self.assertIn("made from a tree with uncommitted changes (`dirty` / `oomlab_dirty`), and no run "
                          "declares its local_patch", gpu_record_problems(out, ROOT))
            (work / "res" / "dry_run").write_text("dry run")
            out, _ = self.report(work, top)
            self.assertIn("a dry run (`dry_run`: oomlab on the meta device): not a GPU measurement",
                          gpu_record_problems(out, ROOT))


class NextSwitches(unittest.TestCase):
    """Every switch gpu_run.sh's NEXT turns on is read by cuda_settings.cpp, reported in the
    runs' device_properties (cuda_backend.cpp) and named by the report (gpu_record.py), so a
    *_next row is never labelled as its default."""

    def test_each_next_switch_is_read_reported_and_named(self):
        import re
        run = (ROOT / "scripts/gpu_run.sh").read_text()
        names = re.findall(r"(OOMLAB_CUDA_[A-Z_]+)=1", " ".join(re.findall(r'^NEXT\+?="([^"]*)"', run, re.M)))
        self.assertGreaterEqual(len(names), 6)
        settings = (ROOT / "kernels/cuda/cuda_settings.cpp").read_text()
        backend = (ROOT / "kernels/cuda/cuda_backend.cpp").read_text()
        record = (ROOT / "scripts/oomlab_report/gpu_record.py").read_text()
        for name in names:
            field = re.search(r"(\w+)\{env_flag\(\"" + name + r"\", false\)\}", settings)
            self.assertIsNotNone(field, f"{name}: not a default-off switch of cuda_settings.cpp")
            key = field.group(1)
            self.assertIn(f'{{"{key}", ', backend, f"{name}: {key} not in device_properties")
            self.assertIn(f'props.get("{key}") == "true"', record, f"{name}: gpu_record.py does not name {key}")


class TorchBenchInput(unittest.TestCase):
    def test_list_without_torch_and_errors_exit_2(self):
        r = run(sys.executable, "scripts/torch_bench.py", "--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("bert384_none_sdpa", r.stdout.split())
        r = run(sys.executable, "scripts/torch_bench.py", "--steps", "0", "r50_tf32")
        self.assertEqual(r.returncode, 2)
        self.assertIn("torch_bench: error:", r.stderr)
        if importlib.util.find_spec("torch") is None:
            r = run(sys.executable, "scripts/torch_bench.py", "r50_tf32")
            self.assertEqual(r.returncode, 2)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("PyTorch is not importable", r.stderr)


@unittest.skipUnless(importlib.util.find_spec("torch") and importlib.util.find_spec("torchvision") and
                     importlib.util.find_spec("transformers"), "PyTorch, torchvision and transformers not installed")
class TorchBenchBaselinesOnTheCpu(unittest.TestCase):
    """torch_bench.py's @best variants run (--device cpu, a batch of 1): channels-last ResNet under
    bf16 autocast with foreach SGD, BERT with SDPA and fused AdamW; spreads and load recorded."""

    def test_best_variants_run_and_say_what_they_ran(self):
        r = subprocess.run([sys.executable, "scripts/torch_bench.py", "--device", "cpu", "--batch", "1", "--steps", "2",
                            "--warmup", "1", "r50_bf16@best", "bert_fp32@best"], capture_output=True, text=True,
                           cwd=ROOT, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        recs = {d["tag"]: d for d in map(json.loads, r.stdout.splitlines())}
        r50, bert = recs["r50_bf16@best"], recs["bert_fp32@best"]
        self.assertNotIn("error", r50, r50)
        self.assertNotIn("error", bert, bert)
        self.assertEqual((r50["baseline"], r50["channels_last"], r50["optimizer_kwargs"]), ("best", True, {"foreach": True}))
        self.assertEqual((bert["attention"], bert["optimizer_kwargs"], bert["batch"]), ("sdpa", {"fused": True}, 1))
        for rec in (r50, bert):
            self.assertLessEqual(rec["p10_ms"], rec["median_ms"])
            self.assertLessEqual(rec["median_ms"], rec["p90_ms"])
            self.assertGreaterEqual(rec["load_avg_1m"], 0)
            self.assertIsNone(rec["peak_allocated"])   # no CUDA memory stats on the CPU


class ExportModel(unittest.TestCase):
    """scripts/export_model.py (issue 32): bad input and a machine without PyTorch are one line
    and exit 2; with PyTorch, a small torchvision model exports to a graph the C++ reader's
    layout expects (the reader itself: tests/test_model_graph.cpp)."""

    def test_usage_errors_and_no_torch_are_one_line(self):
        for args in (["resnet18", "--input-shape", "1,3,8,8", "--out", "/tmp/x.json"],
                     ["torchvision:resnet18", "--input-shape", "1,-3", "--out", "/tmp/x.json"]):
            r = run(sys.executable, "scripts/export_model.py", *args)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("export_model: error:", r.stderr)
        if importlib.util.find_spec("torch") is None:
            r = run(sys.executable, "scripts/export_model.py", "torchvision:resnet18", "--input-shape", "1,3,32,32",
                    "--out", "/tmp/x.json")
            self.assertEqual(r.returncode, 2)
            self.assertIn("PyTorch is not importable", r.stderr)

    @unittest.skipUnless(importlib.util.find_spec("torchvision") is not None, "torchvision is not importable here")
    def test_a_torchvision_model_exports(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "g.json"
            r = run(sys.executable, "scripts/export_model.py", "torchvision:resnet18", "--input-shape", "2,3,32,32",
                    "--out", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            g = json.loads(out.read_text())
            self.assertEqual((g["format"], g["version"]), ("oomlab-graph", 1))
            self.assertEqual(sum(1 for p in g["parameters"] if p["kind"] == "parameter"), 62)
            self.assertTrue(any(n["op"] == "aten.convolution.default" and n["module"] == "conv1" for n in g["nodes"]))


class FatbinArchs(unittest.TestCase):
    def test_a_file_without_cuda_code_is_one_line_exit_2(self):
        r = run(sys.executable, "scripts/fatbin_archs.py", sys.executable)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("fatbin_archs: error:", r.stderr)


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


class TorchSideBySideScripts(unittest.TestCase):
    """scripts/torch_parity.py, graph_parity.py, cpu_vs_torch.py, gloo_vs_torch.py and attention_vs_torch.py
    without PyTorch (as CI runs them): usage errors exit 2 with one line; a machine without torch is a
    clear skip (exit 0); attention_vs_torch's and gloo_vs_torch's oomlab sides read the real JSON of
    bench_attention and allreduce-bench."""

    BENCH = OOMLAB.parent / "bench_attention"

    def test_usage_errors_exit_2(self):
        bench = ["--bench", str(self.BENCH), "--json", "/tmp/unused.json"]
        for script, args in (("torch_parity.py", ["--models", "resnet99"]), ("torch_parity.py", ["--dtypes", "float16"]),
                             ("graph_parity.py", ["--models", "resnet99"]), ("graph_parity.py", ["--dtypes", "float16"]),
                             ("cpu_vs_torch.py", ["--models", "vgg99"]), ("cpu_vs_torch.py", ["--rounds", "0"]),
                             ("gloo_vs_torch.py", ["--ranks", "1"]), ("gloo_vs_torch.py", ["--min-bytes", "6"]),
                             ("attention_vs_torch.py", ["--seqs", "0"] + bench),
                             ("attention_vs_torch.py", ["--dropouts", "100"] + bench),
                             ("attention_vs_torch.py", ["--bench", "/nonexistent", "--json", "/tmp/unused.json"])):
            r = run(sys.executable, ROOT / "scripts" / script, *args)
            self.assertEqual(r.returncode, 2, f"{script} {args}: {r.stdout}{r.stderr}")
            self.assertIn("error:", r.stderr)

    def test_without_torch_they_skip_with_a_message(self):
        if importlib.util.find_spec("torch") is not None:
            self.skipTest("torch is installed here: the scripts run for real")
        for script, args in (("torch_parity.py", []), ("cpu_vs_torch.py", []), ("graph_parity.py", []),
                             ("gloo_vs_torch.py", []),
                             ("attention_vs_torch.py", ["--bench", "/bin/true", "--json", "/tmp/unused.json"])):
            r = run(sys.executable, ROOT / "scripts" / script, *args)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("skipped", r.stdout)

    def test_gloo_oomlab_side_reads_allreduce_bench(self):
        spec = importlib.util.spec_from_file_location("gloo_vs_torch", ROOT / "scripts" / "gloo_vs_torch.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        a = argparse.Namespace(oomlab=str(OOMLAB), ranks=2, min_bytes=4096, max_bytes=16384, step_factor=4, iters=2,
                               warmup=1)
        with tempfile.TemporaryDirectory() as tmp:
            times, sha = mod.run_oomlab(a, tmp)
        self.assertEqual(sorted(times, key=int), ["4096", "16384"])
        self.assertTrue(all(t > 0 for t in times.values()), times)
        self.assertRegex(sha, r"^[0-9a-f]{7,}")

    def test_attention_oomlab_side_reads_bench_attention(self):
        if not self.BENCH.exists():
            self.skipTest(f"{self.BENCH} not built")
        spec = importlib.util.spec_from_file_location("attention_vs_torch", ROOT / "scripts" / "attention_vs_torch.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        rec = mod.oomlab_case(str(self.BENCH), 128, 0, 1)
        self.assertEqual(sorted(rec), ["oomlab_context", "oomlab_eager_ms", "oomlab_fused_ms"])
        self.assertTrue(rec["oomlab_eager_ms"] > 0 and rec["oomlab_fused_ms"] > 0, rec)
        self.assertRegex(rec["oomlab_context"].get("oomlab_git_sha", ""), "^[0-9a-f]{7,40}$")   # the build's provenance


if __name__ == "__main__":
    unittest.main()
