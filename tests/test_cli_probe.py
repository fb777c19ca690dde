"""test_cli_probe.py — scripts/cli_probe.py: random real runs of the CLI at edge values.

ProbeSeesFindings (fast tier): against a stand-in oomlab (a script answering --help and dying
of SIGSEGV or exiting 70 when it meets one flag) the probe reports each such run and exits 1;
a slow training run is listed, not a finding. ProbeOnTheBuild (slow tier): 300 runs of the real
build (seed 1) have no finding.
Run: python3 -m unittest tests/test_cli_probe.py  (OOMLAB_BUILD_DIR: the build with oomlab;
OOMLAB_SLOW_TESTS=1 for ProbeOnTheBuild)
"""
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OOMLAB = ROOT / os.environ.get("OOMLAB_BUILD_DIR", "build") / "oomlab"
PROBE = ROOT / "scripts" / "cli_probe.py"

# A stand-in oomlab: every command has --ranks N and --collective a|b; "--ranks 7" segfaults,
# "--collective b" is an internal error (exit 70), a train run with --ranks 8 sleeps.
STAND_IN = r'''#!/usr/bin/env python3
import os, signal, sys, time
args = sys.argv[1:]
if args[1:] == ["--help"]:
    print("oomlab " + args[0] + " [--ranks N] [--collective a|b]")
    print("  --ranks N                    ranks")
    print("  --collective a|b             which")
    sys.exit(0)
if "--ranks" in args and args[args.index("--ranks") + 1] == "7":
    os.kill(os.getpid(), signal.SIGSEGV)
if "--collective" in args and args[args.index("--collective") + 1] == "b":
    sys.exit(70)
if args[0] == "train" and "--ranks" in args and args[args.index("--ranks") + 1] == "8":
    time.sleep(30)
sys.exit(2)
'''


def probe(oomlab, *flags):
    return subprocess.run([sys.executable, str(PROBE), "--oomlab", str(oomlab), *flags], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


class ProbeSeesFindings(unittest.TestCase):
    def test_a_signal_and_an_internal_error_are_findings_a_slow_train_is_not(self):
        with tempfile.TemporaryDirectory() as d:
            fake = Path(d) / "oomlab"
            fake.write_text(STAND_IN)
            fake.chmod(0o755)
            r = probe(fake, "--runs", "80", "--seed", "3", "--timeout", "2")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("FINDING exit -11: oomlab ", r.stdout)    # SIGSEGV
        self.assertIn("FINDING exit 70: oomlab ", r.stdout)
        for line in r.stdout.splitlines():
            if "FINDING" in line:
                self.assertTrue("--ranks 7" in line or "--collective b" in line, line)
            if line.startswith("cli_probe: slow"):
                self.assertIn("oomlab train ", line)
                self.assertIn("--ranks 8", line)
        self.assertRegex(r.stdout, r"cli_probe: 80 runs \(seed 3\), [1-9][0-9]* finding\(s\)")


@unittest.skipUnless(OOMLAB.exists() and os.environ.get("OOMLAB_SLOW_TESTS") == "1",
                     "slow tier (OOMLAB_SLOW_TESTS=1, scripts/test_slow.sh) with a build")
class ProbeOnTheBuild(unittest.TestCase):
    def test_three_hundred_runs_have_no_finding(self):
        r = probe(OOMLAB, "--runs", "300", "--seed", "1", "--timeout", "60")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("0 finding(s)", r.stdout)


if __name__ == "__main__":
    unittest.main()
