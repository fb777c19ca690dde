"""test_gpu_kit.py — the GPU kit (scripts/gpu_pack.sh + gpu_run.sh) checked on the CPU machine.

KitTorchProtocol (fast tier): gpu_run.sh's torch_read takes the answer for the asked tag and
sets a late answer aside. GpuKit (slow tier, a CUDA build): pack, the archive (at most 40 MiB,
sm_90 code), the one-line stop without a GPU, the dry run (meta) through every step, a budget
cut and the resume of a later lease. The other GPU scripts: tests/test_gpu_tools.py.
Run: python3 -m unittest tests/test_gpu_kit.py  (OOMLAB_BUILD_DIR: the build with oomlab;
OOMLAB_SLOW_TESTS=1 for GpuKit)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OOMLAB = ROOT / os.environ.get("OOMLAB_BUILD_DIR", "build") / "oomlab"


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=ROOT, timeout=300)


class KitTorchProtocol(unittest.TestCase):
    """gpu_run.sh's torch_read: the answer for the asked tag; a late answer to an earlier command
    (one whose wait timed out, e.g. a long torch.compile) is set aside, not taken for this one."""

    def test_a_late_answer_is_not_taken_for_the_next(self):
        text = (ROOT / "scripts" / "gpu_run.sh").read_text()
        func = text[text.index("torch_read() {"):]
        func = func[:func.index("\n}\n") + 3]
        with tempfile.TemporaryDirectory() as tmp:
            script = (f"work={tmp}; mkdir -p $work/logs\n"
                      "exec {torch_out}< <(printf '%s\\n' '{\"tag\": \"r50_bf16@compile\", \"median_ms\": 1}' "
                      "'{\"tag\": \"r50_bf16\", \"median_ms\": 2}'; sleep 3)\n" + func +
                      "torch_read 5 r50_bf16; torch_read 1 bert_bf16\n")
            r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = [json.loads(x) for x in r.stdout.splitlines()]
            self.assertEqual(got[0], {"tag": "r50_bf16", "median_ms": 2})
            self.assertIn("no answer", got[1]["error"])   # none came for bert_bf16 within its second
            late = [json.loads(x) for x in (Path(tmp) / "logs" / "torch_late.jsonl").read_text().splitlines()]
            self.assertEqual(late, [{"tag": "r50_bf16@compile", "median_ms": 1}])


# a build with the CUDA backend: oomlab's liboomlab_cuda.so beside it (loaded at the first CUDA use)
CUDA_LIBRARY = OOMLAB.parent / "liboomlab_cuda.so"
CUDA_BUILD = CUDA_LIBRARY.exists() and subprocess.run(["ldd", str(CUDA_LIBRARY)], capture_output=True,
                                                      text=True).stdout.find("libcudart") >= 0


def run_kit_cut_after(kit, out, env, name, points):
    """The kit into OUT while the `timeout` around `oomlab run` of experiment NAME gets SIGTERM
    once NAME's partial file holds POINTS points; `timeout` then does what it does when the
    budget runs out (SIGTERM to its process group: the runner and its point). A cut at a point
    count, not at a time, so a faster machine cannot finish the experiment first."""
    import signal
    import time
    kit_run = subprocess.Popen(["bash", kit / "scripts" / "gpu_run.sh", out], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    partial, target = out / f"{name}.json.partial", str(out / f"{name}.json")
    deadline = time.monotonic() + 240
    while kit_run.poll() is None and time.monotonic() < deadline:
        try:
            done = len(json.loads(partial.read_text())["points"])
        except (OSError, ValueError, KeyError):
            done = 0
        if done >= points:
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    argv = cmdline.read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv[0].endswith(b"timeout") and target.encode() in argv:
                    os.kill(int(cmdline.parent.name), signal.SIGTERM)
            break
        time.sleep(0.05)
    text = kit_run.communicate(timeout=300)[0]
    return kit_run.returncode, text


@unittest.skipUnless(CUDA_BUILD and os.environ.get("OOMLAB_SLOW_TESTS") == "1",
                     "slow tier (OOMLAB_SLOW_TESTS=1, scripts/test_slow.sh) with a CUDA build")
class GpuKit(unittest.TestCase):
    """The kit end to end on this machine without a GPU: scripts/gpu_pack.sh on the CI build
    (its CUDA code includes sm_90), an archive of at most 40 MiB whose binaries hold sm_90
    machine code; from the unpacked archive, scripts/gpu_run.sh stops with one clear line and
    still writes its folder, and its dry run (meta device) goes through every step."""

    def test_pack_then_run_without_a_gpu(self):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, OOMLAB_PACK_BUILD_DIR=str(OOMLAB.parent), OOMLAB_PACK_ALLOW_DIRTY="1")
            r = subprocess.run(["bash", "scripts/gpu_pack.sh", tmp], capture_output=True, text=True, cwd=ROOT,
                               env=env, timeout=900)
            self.assertEqual(r.returncode, 0, r.stderr)
            archive = Path(r.stdout.strip().splitlines()[-1])
            self.assertLessEqual(archive.stat().st_size, 40 << 20)
            subprocess.run(["tar", "-xJf", archive, "-C", tmp], check=True)
            kit = Path(tmp) / archive.name[:-len(".tar.xz")]
            manifest = json.loads((kit / "MANIFEST.json").read_text())
            self.assertEqual(manifest["sm"], "90")
            self.assertIn("90", manifest["cuda_architectures"])
            # oomlab is the CPU build; its CUDA backend is liboomlab_cuda.so beside it
            bins = sorted(str(p) for p in (kit / "bin").iterdir() if p.name != "oomlab")
            self.assertIn(str(kit / "bin" / "test_cuda_models"), bins)
            self.assertIn(str(kit / "bin" / "liboomlab_cuda.so"), bins)
            r = run(sys.executable, "scripts/fatbin_archs.py", "--need-sass", "90", *bins)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            out = Path(tmp) / "out"
            env = {k: v for k, v in os.environ.items() if k != "OOMLAB_KIT_DRY_RUN"}
            r = subprocess.run(["bash", kit / "scripts" / "gpu_run.sh", out], capture_output=True, text=True, env=env,
                               timeout=300)
            self.assertEqual(r.returncode, 1, r.stdout)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("gpu_run: error: no GPU", r.stderr)
            self.assertIn("The run stopped", (out / "README.md").read_text())
            self.assertTrue((out / "logs.tar.gz").stat().st_size > 0)
            dry = Path(tmp) / "dry"
            r = subprocess.run(["bash", kit / "scripts" / "gpu_run.sh", dry], capture_output=True, text=True,
                               env=dict(env, OOMLAB_KIT_DRY_RUN="1", OOMLAB_KIT_TAGS="all",
                                        OOMLAB_KIT_EXPERIMENTS="06 10 15"), timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            files = sorted(p.name for p in dry.iterdir())
            self.assertLessEqual(len(files), 11, files)
            # the experiments' gpu profiles, on meta: results in their schema, nothing judged;
            # PyTorch twins (15) and NCCL (10) skipped off a GPU
            for name in ("06_checkpointing", "10_allreduce", "15_fused_attention"):
                res = json.loads((dry / f"{name}.json").read_text())
                self.assertEqual((res["config"]["profile"], res["config"]["device"]), ("gpu", "meta"), name)
                self.assertEqual(res["verdict"]["status"], "pending GPU", name)
            res = json.loads((dry / "15_fused_attention.json").read_text())
            self.assertEqual({p["outcome"]["status"] for p in res["points"] if p["command"] == "torch"}, {"skipped"})
            self.assertIn("### 06_checkpointing: pending GPU (20 points", (dry / "README.md").read_text())
            for f in ("README.md", "points.json", "tests.json", "provenance.json", "run.log", "logs.tar.gz",
                      "breakdown.txt"):
                self.assertIn(f, files)
            # the NEXT paths traced per op under their switches, beside the default's trace
            self.assertIn("== oomlab bert_tf32_next (OOMLAB_CUDA_EMBEDDING_SPLIT=1", (dry / "breakdown.txt").read_text())
            pts = json.loads((dry / "points.json").read_text())
            for tag in ("r50_fp32", "bert384_selective", "par_ddp_syncbn"):
                self.assertIsNotNone(pts[tag]["oomlab"], tag)
            self.assertEqual(pts["r50_fp32"]["meta_over_cuda_peak"], 1.0)   # meta against itself: exact
            # PyTorch's protocol answered every pair (torch_bench.py --dry-run): the H200 run at
            # 03cd90e lost every answer to coproc descriptors closed in command substitutions.
            for tag in ("r50_fp32", "bert_bf16", "bert384_none_sdpa"):
                self.assertEqual(pts[tag]["torch"].get("error"), "dry run: PyTorch was not run", tag)
            # issue 54's baselines: PyTorch's best eager twin, once a round although r50_bf16 and
            # r50_bf16_cl share it, then torch.compile of it (or its skip for the budget)
            log = (dry / "run.log").read_text()
            self.assertEqual(log.count("torch r50_bf16@best: "), 1, log)
            self.assertRegex(log, r"torch r50_bf16@compile: |skipped: torch r50_bf16@compile \(budget\)")
            t = json.loads((dry / "tests.json").read_text())
            self.assertTrue(t["binaries"])
            self.assertTrue(all(b.get("failed") == 0 for b in t["binaries"].values()), t)
            self.assertIn("DRY RUN", (dry / "README.md").read_text())
            # the parity suite's attention rows on the tiled kernels too; graph-API rows beside
            # their defaults; fused attention beside PyTorch's SDPA (the torch-only *_sdpa rows)
            self.assertIn("test_cuda_parity_tiled", t["binaries"])
            self.assertIn("test_cuda_models_shard1", t["binaries"])   # two gtest shards side by side
            self.assertIsNotNone(pts["bert_tf32_fused"]["oomlab"])
            self.assertIsNotNone(pts["r50_bf16_graph"]["time_ratio_next_over_default"])
            self.assertIn("test_cuda_parity_graph", t["binaries"])
            self.assertIn("test_cuda_parity_reference_attention", t["binaries"])
            self.assertEqual(pts["r50_bf16_graph"]["default_tag"], "r50_bf16")
            self.assertEqual(pts["vgg16_tf32_graph"]["default_tag"], "vgg16_tf32")
            self.assertEqual(pts["bert_tf32_next"]["default_tag"], "bert_tf32")   # NEXT: unmeasured paths
            self.assertEqual(pts["r50_bf16_cl_next"]["default_tag"], "r50_bf16_cl")
            self.assertIn("test_cuda_parity_next", t["binaries"])   # the parity rows under NEXT
            self.assertEqual(pts["r50_tf32_bench_legacy"]["default_tag"], "r50_tf32_bench")
            # --cuda-graphs beside its default (on meta: warm-up, capture, replays all ran)
            self.assertEqual(pts["r50_bf16_cudagraphs"]["default_tag"], "r50_bf16")
            self.assertIsNotNone(pts["r50_bf16_cudagraphs"]["time_ratio_next_over_default"])
            self.assertIn("test_cuda_graphs", t["binaries"])
            # --channels-last (NCHW's default beside it, and NHWC on the legacy heuristics)
            self.assertEqual(pts["r50_bf16_cl"]["default_tag"], "r50_bf16")
            self.assertEqual(pts["r50_tf32_cl"]["default_tag"], "r50_tf32")
            self.assertEqual(pts["r50_bf16_cl_legacy"]["default_tag"], "r50_bf16_cl")
            self.assertEqual(pts["r50_bf16_cl_cudagraphs"]["default_tag"], "r50_bf16_cl")
            # --pin-memory beside the pageable default (experiment 09's trick 10), PyTorch asked too
            self.assertEqual(pts["r50_tf32_pin"]["default_tag"], "r50_tf32")
            self.assertEqual(pts["r50_tf32_pin"]["torch"].get("error"), "dry run: PyTorch was not run")
            # a follow-up lease runs a part: the listed pairs, tests and breakdowns alone
            part = Path(tmp) / "part"
            r = subprocess.run(["bash", kit / "scripts" / "gpu_run.sh", part], capture_output=True, text=True,
                               env=dict(env, OOMLAB_KIT_DRY_RUN="1", OOMLAB_KIT_TAGS="r50_fp32 r50_tf32_cl", OOMLAB_KIT_EXPERIMENTS="",
                                        OOMLAB_KIT_TESTS="test_cuda_graphs", OOMLAB_KIT_BREAKDOWN="r50_tf32_cl",
                                        OOMLAB_KIT_REPEAT="2"),
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            pts = json.loads((part / "points.json").read_text())
            self.assertEqual(sorted(t for t, p in pts.items() if p.get("oomlab")), ["r50_fp32", "r50_tf32_cl"])
            # OOMLAB_KIT_REPEAT=2: a second round of the pairs (the dry run's PyTorch answers no median)
            self.assertIn("oomlab r50_fp32.r2 rc=0", (part / "run.log").read_text())
            self.assertEqual(pts["r50_fp32"]["repeated"]["ratio"]["n"], 0)
            bad = subprocess.run(["bash", kit / "scripts" / "gpu_run.sh", Path(tmp) / "bad"], capture_output=True,
                                 text=True, env=dict(env, OOMLAB_KIT_DRY_RUN="1", OOMLAB_KIT_REPEAT="0"), timeout=60)
            self.assertEqual(bad.returncode, 2)
            self.assertIn("OOMLAB_KIT_REPEAT must be 1..99", bad.stderr)
            self.assertEqual(list(json.loads((part / "tests.json").read_text())["binaries"]), ["test_cuda_graphs"])
            self.assertIn("r50_tf32_cl", (part / "breakdown.txt").read_text())
            self.assertNotIn("experiment", (part / "run.log").read_text())   # OOMLAB_KIT_EXPERIMENTS=""
            # A budget too short for an experiment skips it and the later ones.
            cut, rest, short = Path(tmp) / "cut", Path(tmp) / "rest", Path(tmp) / "short"
            quick = dict(env, OOMLAB_KIT_DRY_RUN="1", OOMLAB_KIT_TESTS="none")
            r = subprocess.run(["bash", kit / "scripts" / "gpu_run.sh", short], capture_output=True, text=True,
                               env=dict(quick, OOMLAB_KIT_EXPERIMENTS="11", OOMLAB_KIT_BUDGET_S="40"), timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("skipped: experiment 11_data_parallel and later (budget)", (short / "run.log").read_text())
            # A lease's budget stops an experiment mid-way (SIGTERM from `timeout`; sent here after
            # 3 of 15 points): its points stay in NN_name.partial.json, which the next lease's kit
            # (gpu_pack.sh OOMLAB_KIT_RESUME puts it in resume/) goes on from; a finished NN_name.json
            # there is not run again.
            rc, text = run_kit_cut_after(kit, cut, dict(quick, OOMLAB_KIT_EXPERIMENTS="11"), "11_data_parallel", 3)
            self.assertEqual(rc, 0, text)
            self.assertFalse((cut / "11_data_parallel.json").exists(), text)
            partial = json.loads((cut / "11_data_parallel.partial.json").read_text())
            self.assertIn("**11_data_parallel**: cut by the budget", (cut / "README.md").read_text())
            self.assertGreaterEqual(len(partial["points"]), 3)
            self.assertLess(len(partial["points"]), 15)
            (kit / "resume").mkdir()
            shutil.copy(cut / "11_data_parallel.partial.json", kit / "resume")
            shutil.copy(dry / "06_checkpointing.json", kit / "resume")
            r = subprocess.run(["bash", kit / "scripts" / "gpu_run.sh", rest], capture_output=True, text=True,
                               env=dict(quick, OOMLAB_KIT_EXPERIMENTS="06 11"), timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            log = (rest / "run.log").read_text()
            self.assertIn("experiment 06_checkpointing: finished in an earlier record", log)
            run_log = subprocess.run(["tar", "-xzOf", rest / "logs.tar.gz", "logs/run_11_data_parallel.log"],
                                     capture_output=True, text=True).stdout
            self.assertIn("resuming from", run_log)
            res = json.loads((rest / "11_data_parallel.json").read_text())
            self.assertEqual((res["runner"]["resumed"], res["runner"]["points"]), (len(partial["points"]), 15))
