"""gpu_order.py — when each GPU record (reports/results/gpu/<record>/) ran, and so which is the
newest: the one ordering behind every "newest record" choice of the report (gpu_points.one_call
for the experiments' GPU tables, gpu_section's appendix and its superseded rule).

run_started(folder) -> Started(key, shown, source): the start of the record's run as a UTC
timestamp "YYYY-MM-DDTHH:MM:SSZ" (key; shown: "YYYY-MM-DD HH:MM:SS UTC"), from the first of:
  1. provenance.json `started_at` (scripts/gpu_report.py writes it from the kit's res/started_at);
  2. res/started_at inside the record's logs.tar.gz (kit records written before step 1 existed;
     read in memory, never extracted);
  3. the earliest context.date of the oomlab results run*/res/*.json (records the kit did not make);
  4. provenance.json `date`, a day only: key "YYYY-MM-DD", which sorts before every timed run of
     that day (its time is unknown) and after every run of the days before.
None of these: key "" (older than any record that says when it ran).
newest_first(folders) -> the folders sorted newest first by (key, folder name): the name only
breaks ties of equal keys, never orders records of one day.
Contract: never raises on a missing or broken file (that source is skipped); committed records
are only read. Standard library only.
"""
import json
import re
import tarfile
from collections import namedtuple
from datetime import datetime, timezone
from pathlib import Path

Started = namedtuple("Started", "key shown source")
DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
STARTED_MEMBER = re.compile(r"^(?:\./)?res/started_at$")


def utc_stamp(text):
    """"YYYY-MM-DDTHH:MM:SSZ" (UTC) of an ISO 8601 time (no zone: UTC), or None."""
    text = str(text or "").strip()
    if not STAMP.match(text):
        return None
    try:
        t = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    t = t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _json(path):
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _archive_started(folder):
    try:
        with tarfile.open(Path(folder) / "logs.tar.gz", "r:gz") as tar:
            for m in tar:
                if m.isfile() and STARTED_MEMBER.match(m.name):
                    return tar.extractfile(m).read().decode("utf-8", errors="replace")
    except (OSError, tarfile.TarError, EOFError):
        pass
    return None


def _earliest_result(folder):
    stamps = []
    for f in sorted(Path(folder).glob("run*/res/*.json")):
        ctx = (_json(f) or {}).get("context")
        stamp = utc_stamp(ctx.get("date")) if isinstance(ctx, dict) else None
        if stamp:
            stamps.append((stamp, f.relative_to(folder).as_posix()))
    return min(stamps) if stamps else None


def run_started(folder):
    folder = Path(folder)
    prov = _json(folder / "provenance.json") or {}
    stamp = utc_stamp(prov.get("started_at"))
    source = "provenance.json started_at"
    if not stamp and (folder / "logs.tar.gz").is_file():
        stamp, source = utc_stamp(_archive_started(folder)), "res/started_at in logs.tar.gz"
    if not stamp:
        earliest = _earliest_result(folder)
        if earliest:
            stamp, source = earliest[0], f"the earliest oomlab result's context.date ({earliest[1]})"
    if stamp:
        return Started(stamp, stamp[:10] + " " + stamp[11:19] + " UTC", source)
    day = str(prov.get("date") or "")
    if DAY.match(day):
        return Started(day, day + " (time not recorded)", "provenance.json date")
    return Started("", "not recorded", "nothing in the record says when it ran")


def newest_first(folders):
    keyed = [(run_started(f).key, Path(f).name, f) for f in folders]
    return [f for _, _, f in sorted(keyed, key=lambda k: (k[0], k[1]), reverse=True)]
