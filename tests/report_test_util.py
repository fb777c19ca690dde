"""report_test_util.py — running scripts/make_report.py from the Python tests: the interpreter
that has matplotlib (this one, else the distro's /usr/bin/python3; None when neither does) and
one call of the report generator from the repository's root. Standard library only.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def python_with_matplotlib():
    for py in (sys.executable, "/usr/bin/python3"):
        if Path(py).exists() and subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            return py
    return None


def run_make_report(*args, timeout=600):
    """scripts/make_report.py ARGS, run from the repository's root: the CompletedProcess (text)."""
    return subprocess.run([python_with_matplotlib() or "/usr/bin/python3", str(ROOT / "scripts" / "make_report.py"),
                           *[str(a) for a in args]], capture_output=True, text=True, cwd=ROOT, timeout=timeout)
