"""test_comment_refs.py — scripts/check_comment_refs.py: a comment naming a repository file
that does not exist fails, one naming an existing file passes; paths in code (strings,
include lines, paths built at run time), globs, placeholders, URLs and build outputs are not
references. Then the checker's own self-test (a planted tree), and the repository itself:
every file a comment of a tracked source file names exists.
Run: python3 -m unittest tests/test_comment_refs.py
"""
import subprocess
import sys
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import check_comment_refs as ccr  # noqa: E402


def refs(line):
    return list(ccr.references(line))


class References(unittest.TestCase):
    def test_paths_with_a_known_top_folder_and_an_extension(self):
        self.assertEqual(refs("see engine/train/trainer.h and `docs/VERDICTS.md`."),
                         ["engine/train/trainer.h", "docs/VERDICTS.md"])
        self.assertEqual(refs("(experiments/cli/flag_table.cpp:140), tests/test_cli.cpp:12-30;"),
                         ["experiments/cli/flag_table.cpp", "tests/test_cli.cpp"])
        self.assertEqual(refs("[--json reports/benchmarks/cpu_vs_torch.json]"), ["reports/benchmarks/cpu_vs_torch.json"])
        self.assertEqual(refs("relative: ../softmax.h, ./cuda_device.h"), ["../softmax.h", "./cuda_device.h"])

    def test_what_is_not_a_reference(self):
        for line in ("kernels/<family>.h, tests/test_*.cpp, kernels/{cpu,cuda}/x.h, $OUT/reports/x.json",
                     "experiments/NN_name/README.md, reports/results/NAME.json, docs/X.md",
                     "https://github.com/o/r/blob/main/engine/core/tensor.h www.x.org/docs/a.html",
                     "/usr/include/cuda/std.h, half_widen.h, cuda/launch_utils.cuh, engine/ops/, engine/...",
                     "engine/core and kernels/cpu (folders), lib/engine/x.h, <kit>/scripts/gpu_run.sh"):
            self.assertEqual(refs(line), [], line)


class Comments(unittest.TestCase):
    def test_cpp_comments_only(self):
        text = ('#include "engine/core/a.h"  // engine/core/b.h\n'
                "int n = 1'000'000; char q = '\"'; /* engine/c.h\n   engine/d.h */\n"
                'auto s = "// engine/e.h"; auto r = R"x(// engine/f.h)x"; // engine/g.h\n')
        got = [(ln, r) for ln, t in ccr.c_comments(text) for r in refs(t)]
        self.assertEqual(got, [(1, "engine/core/b.h"), (2, "engine/c.h"), (3, "engine/d.h"), (4, "engine/g.h")])

    def test_python_comments_and_docstrings_only(self):
        text = ('"""Reads docs/A.md."""\nOUT = "reports/results/made_at_run_time.json"  # docs/B.md\n'
                'def f():\n    """docs/C.md"""\n    return "docs/D.md"\n')
        got = [(ln, r) for ln, t in ccr.python_comments(text) for r in refs(t)]
        self.assertEqual(got, [(1, "docs/A.md"), (2, "docs/B.md"), (4, "docs/C.md")])

    def test_shell_and_cmake_comments_only(self):
        text = ('echo "# docs/A.md" $# # docs/B.md\ncat <<\'EOF\'\n# docs/C.md\nEOF\n# docs/D.md\n')
        got = [(ln, r) for ln, t in ccr.hash_comments(text, shell=True) for r in refs(t)]
        self.assertEqual(got, [(1, "docs/B.md"), (5, "docs/D.md")])
        got = [(ln, r) for ln, t in ccr.hash_comments('set(X "#docs/A.md")  # docs/B.md\n', shell=False)
               for r in refs(t)]
        self.assertEqual(got, [(1, "docs/B.md")])


class CommandLine(unittest.TestCase):
    def run_checker(self, *args):
        return subprocess.run([sys.executable, str(ROOT / "scripts/check_comment_refs.py"), *args],
                              capture_output=True, text=True, timeout=120)

    def test_the_self_test_finds_the_planted_missing_references(self):
        r = self.run_checker("--self-test")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_every_reference_in_the_repository_resolves(self):
        r = self.run_checker(str(ROOT))
        self.assertEqual(r.returncode, 0, "files named in comments that do not exist "
                         "(fix the comment, or the checker's rules in its docstring):\n" + r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
