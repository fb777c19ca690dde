"""test_gpu_records.py — which GPU record is the newest (oomlab_report/gpu_order.py), the one
ordering the report's GPU choices use: records planted in a temporary folder, two of them run
on the same day, the alphabetically later one earlier. The run's start comes from
provenance.json's started_at, else res/started_at in the record's logs.tar.gz, else the
earliest context.date of its run*/res/*.json, else the provenance date (a day only).
Run: python3 -m unittest tests/test_gpu_records.py
"""
import io
import json
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))   # a test is not a script of scripts/


def plant(top, name, date, started_at=None, archived=None, points=None, gpu="NVIDIA H100 80GB HBM3"):
    """A kit record: provenance.json (with started_at when given), a logs.tar.gz holding
    res/started_at = archived when given, points.json."""
    d = Path(top) / name
    d.mkdir(parents=True)
    prov = {"date": date, "commit": "abcdef1234567890", "machine": {"gpu": gpu}}
    if started_at:
        prov["started_at"] = started_at
    (d / "provenance.json").write_text(json.dumps(prov))
    (d / "points.json").write_text(json.dumps(points or {}))
    if archived:
        with tarfile.open(d / "logs.tar.gz", "w:gz") as tar:
            data = (archived + "\n").encode()
            info = tarfile.TarInfo("./res/started_at")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return d


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


if __name__ == "__main__":
    unittest.main()
