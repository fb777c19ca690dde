"""test_gpu_records.py — which GPU record is the newest (oomlab_report/gpu_order.py), the one
ordering the report's GPU choices use: records planted in a temporary folder, two of them run
on the same day, the alphabetically later one earlier. The run's start comes from
provenance.json's started_at, else res/started_at in the record's logs.tar.gz, else the
earliest context.date of its run*/res/*.json, else the provenance date (a day only).
Run: python3 -m unittest tests/test_gpu_records.py
"""
import io
import json
import re
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path

from tests.report_test_util import run_make_report

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))   # a test is not a script of scripts/


def plant(top, name, date, started_at=None, archived=None, points=None, gpu="NVIDIA H100 80GB HBM3",
          files=None, tests=None):
    """A kit record: provenance.json (with started_at when given), points.json, tests.json when
    given, and a logs.tar.gz holding res/started_at = archived and `files` ({member: text}) when
    either is given."""
    d = Path(top) / name
    d.mkdir(parents=True)
    prov = {"date": date, "commit": "abcdef1234567890", "machine": {"gpu": gpu}}
    if started_at:
        prov["started_at"] = started_at
    (d / "provenance.json").write_text(json.dumps(prov))
    (d / "points.json").write_text(json.dumps(points or {}))
    if tests is not None:
        (d / "tests.json").write_text(json.dumps(tests))
    members = dict(files or {}, **({"./res/started_at": archived + "\n"} if archived else {}))
    if members:
        with tarfile.open(d / "logs.tar.gz", "w:gz") as tar:
            for member, text in members.items():
                data = text.encode()
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return d


def ran(oomlab=(), torch=()):
    """logs.tar.gz members of a kit run: oomlab results of `oomlab` tags, PyTorch lines of `torch`."""
    files = {f"res/oomlab_{t}.json": json.dumps({"config": {"model": "resnet50"}, "metrics": {}}) for t in oomlab}
    if torch:
        files["res/torch.jsonl"] = "\n".join(json.dumps({"tag": t, "median_ms": 1.0}) for t in torch) + "\n"
    return files


def point(ms):
    return {"oomlab": {"median_ms": ms, "peak_allocated": 1e9}, "torch": None}


class NewestByRunStart(unittest.TestCase):
    def test_the_later_run_of_one_day_wins_over_a_later_name(self):
        from oomlab_report.gpu_order import newest_first, run_started
        from oomlab_report.gpu_points import gpu_table, one_call
        with tempfile.TemporaryDirectory() as top:
            # "z-..." sorts after "a-..." by name and both say 2026-11-27: the run's time decides
            plant(top, "z-older-0606", "2026-11-27", archived="2026-11-27T06:06:15Z", points={"t": point(9)})
            plant(top, "a-newer-0755", "2026-11-27", archived="2026-11-27T07:55:24Z", points={"t": point(7)})
            self.assertEqual(one_call(["t"], top)[0], "a-newer-0755")
            self.assertEqual([f.name for f in newest_first(Path(top).iterdir())], ["a-newer-0755", "z-older-0606"])
            self.assertIn("`a-newer-0755`", gpu_table([("row", "t", "t")], gpu_dir=top))
            self.assertIn("run 2026-11-27 07:55:24 UTC", gpu_table([("row", "t", "t")], gpu_dir=top))
            started = run_started(Path(top) / "z-older-0606")
            self.assertEqual((started.key, started.source), ("2026-11-27T06:06:15Z", "res/started_at in logs.tar.gz"))

    def test_provenance_started_at_first_then_the_archive_then_the_day(self):
        from oomlab_report.gpu_order import newest_first, run_started
        with tempfile.TemporaryDirectory() as top:
            # provenance's started_at is read before the archive (which says otherwise here)
            plant(top, "m-prov", "2026-11-27", started_at="2026-11-27T08:00:00Z", archived="2026-11-27T01:00:00Z")
            plant(top, "b-archive", "2026-11-27", archived="2026-11-27T07:00:00Z")
            plant(top, "z-day-only", "2026-11-27")          # time unknown: before the timed runs of its day
            plant(top, "y-day-before", "2026-11-26T23:59:59+00:00")   # not a day: falls to ""
            plant(top, "x-results", "2026-11-26")
            res = Path(top) / "x-results" / "run1" / "res"
            res.mkdir(parents=True)
            for n, stamp in enumerate(("2026-11-26T21:00:05Z", "2026-11-26T20:59:59Z", "not a date")):
                (res / f"oomlab_{n}.json").write_text(json.dumps({"context": {"date": stamp}}))
            order = [f.name for f in newest_first(Path(top).iterdir())]
            self.assertEqual(order, ["m-prov", "b-archive", "z-day-only", "x-results", "y-day-before"])
            self.assertEqual(run_started(Path(top) / "x-results").key, "2026-11-26T20:59:59Z")
            self.assertEqual(run_started(Path(top) / "z-day-only").shown, "2026-11-27 (time not recorded)")
            self.assertEqual(run_started(Path(top) / "y-day-before").key, "")

    def test_a_broken_archive_or_provenance_is_skipped(self):
        from oomlab_report.gpu_order import run_started
        with tempfile.TemporaryDirectory() as top:
            d = plant(top, "broken", "2026-11-27")
            (d / "logs.tar.gz").write_bytes(b"not gzip")
            self.assertEqual(run_started(d).key, "2026-11-27")
            (d / "provenance.json").write_text("{not json")
            self.assertEqual(run_started(d).key, "")

    def test_the_committed_records_order(self):
        """The H100 kit runs of 2026-11-27 (07:45-07:55 UTC) are newer than the H200 ones of that
        morning (05:45-06:06 UTC), whatever their names."""
        from oomlab_report.gpu_order import newest_first
        gpu = ROOT / "reports/results/gpu"
        names = {"h100-2026-11-27-kit", "h200-2026-11-27-kit5-models"}
        if not all((gpu / n).is_dir() for n in names):
            self.skipTest("the committed records are not here")
        order = [f.name for f in newest_first(gpu.iterdir()) if f.name in names]
        self.assertEqual(order, ["h100-2026-11-27-kit", "h200-2026-11-27-kit5-models"])


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


class Appendix(unittest.TestCase):
    """REPORT.md's GPU appendix (oomlab_report/gpu_section.py): one short table per record, newest
    run first; a record whose every configuration, test and sanitizer a later run on the same GPU
    model ran again is superseded: listed and linked, not tabulated."""

    @staticmethod
    def render(gpu_dir):
        from oomlab_report.gpu_section import render_gpu_section
        return render_gpu_section(gpu_dir, "reports/results")

    def test_superseded_by_a_later_run_on_the_same_gpu_that_ran_all_of_it(self):
        tests = {"binaries": {"test_cuda_parity": {"passed": 7, "failed": 1, "skipped": 2, "exit_status": 1}},
                 "sanitizers": {"memcheck": {"exit_status": 0, "summary": "ERROR SUMMARY: 0 errors"}}}
        with tempfile.TemporaryDirectory() as top:
            plant(top, "z-old", "2026-11-27", archived="2026-11-27T06:00:00Z", files=ran(["a"], ["a"]))
            plant(top, "y-old-more", "2026-11-27", archived="2026-11-27T06:30:00Z", files=ran(["a", "c"]))
            plant(top, "b-new", "2026-11-27", archived="2026-11-27T07:00:00Z", files=ran(["a", "b"], ["a"]),
                  tests=tests)
            plant(top, "a-other-gpu", "2026-11-27", archived="2026-11-27T08:00:00Z", gpu="NVIDIA H200",
                  files=ran(["a", "b", "c"], ["a"]))
            md = self.render(top)
        heads = re.findall(r"^### `([^`]+)`", md, re.M)
        self.assertEqual(heads, ["a-other-gpu", "b-new", "y-old-more"])   # newest first; z-old superseded
        self.assertIn("- [`z-old`](results/gpu/z-old/README.md): NVIDIA H100 80GB HBM3, run 2026-11-27 "
                      "06:00:00 UTC; `b-new` ran all of it later.", md)
        table = md.split("### `b-new`")[1].split("###")[0]
        self.assertIn("| run started | 2026-11-27 07:00:00 UTC; from res/started_at in logs.tar.gz |", table)
        self.assertIn("| tests | 7 passed, 1 failed, 2 skipped in 1 binary (tests.json); failing or non-zero exit: "
                      "test_cuda_parity |", table)
        self.assertIn("| sanitizers | memcheck: exit 0, ERROR SUMMARY: 0 errors |", table)
        self.assertIn("| ran | 2 oomlab configurations (ResNet-50); 1 PyTorch configuration; 1 pair (one tag, one "
                      "call) |", table)
        self.assertIn("| commit | `abcdef123456` |", table)

    def test_a_broken_record_renders_missing_not_an_error(self):
        with tempfile.TemporaryDirectory() as top:
            d = plant(top, "broken", "2026-11-27", archived="2026-11-27T07:00:00Z")
            (d / "logs.tar.gz").write_bytes(b"not gzip")
            (d / "provenance.json").unlink()
            md = self.render(top)
        self.assertIn("| GPU | missing; driver missing", md)
        self.assertIn("| run started | not recorded; from nothing in the record says when it ran |", md)
        self.assertIn("| unreadable | provenance.json missing; logs.tar.gz: unreadable (ReadError) |", md)
        self.assertIsNone(self.render(Path(top) / "gone"))

    def test_the_committed_records(self):
        """Each committed kit record's tests row is its tests.json's sums; the order is the
        run's start; every link of the appendix is a file of the repository."""
        from oomlab_report.gpu_order import newest_first
        gpu = ROOT / "reports/results/gpu"
        if not gpu.is_dir():
            self.skipTest("no committed GPU records")
        md = self.render(gpu)
        heads = re.findall(r"^### `([^`]+)`", md, re.M)
        gone = re.findall(r"^- \[`([^`]+)`\]", md, re.M)
        order = [f.name for f in newest_first(p for p in gpu.iterdir() if p.is_dir())]
        self.assertEqual(heads, [n for n in order if n in heads])
        self.assertEqual(gone, [n for n in order if n in gone])
        self.assertEqual(len(heads + gone), sum(1 for p in gpu.iterdir() if p.is_dir()))
        for name in heads:
            t = gpu / name / "tests.json"
            bins = json.loads(t.read_text())["binaries"] if t.is_file() else {}
            if bins:
                self.assertIn(f"| tests | {sum(b.get('passed', 0) for b in bins.values())} passed, "
                              f"{sum(b.get('failed', 0) for b in bins.values())} failed", md.split(f"### `{name}`")[1])
        for target in re.findall(r"\]\(([^)#]+)\)", md):
            self.assertTrue((ROOT / "reports" / target).exists(), target)

    def test_make_report_appends_it_after_the_experiments(self):
        with tempfile.TemporaryDirectory() as out:
            r = run_make_report("--out", out)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            text = (Path(out) / "REPORT.md").read_text()
        self.assertIn("[GPU results](#gpu-results)", text.split("## 01_")[0])
        self.assertGreater(text.index("## GPU results"), text.index("## 18_channels_last"))


if __name__ == "__main__":
    unittest.main()
