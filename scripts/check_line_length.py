#!/usr/bin/env python3
"""check_line_length.py — fails when a C++ source line (.cpp .h .cu .cuh, tracked or new) is
longer than 120 columns, the limit of the repository's .clang-format (format a line you touch
with `clang-format -i --lines=A:B FILE`). Every offending line is printed as
FILE:LINE: N columns; the exit status is 1 if there is one, else 0.
Usage: python3 scripts/check_line_length.py [REPO_ROOT]
       python3 scripts/check_line_length.py --self-test   (the checker on a planted long line)
"""
import subprocess
import sys
import tempfile
from pathlib import Path

LIMIT = 120
SUFFIXES = (".cpp", ".h", ".cu", ".cuh")


def long_lines(path: Path, rel: str):
    """(rel, line number, columns) of each line of `path` over the limit."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return [(rel, n, len(line)) for n, line in enumerate(text.split("\n"), 1) if len(line) > LIMIT]


def tracked_sources(root: Path):
    out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"], capture_output=True,
                         text=True, check=True).stdout
    return [rel for rel in out.split("\n") if rel.endswith(SUFFIXES)]


def check(root: Path, files) -> int:
    found = []
    for rel in files:
        if (root / rel).is_file():
            found += long_lines(root / rel, rel)
    for rel, n, cols in found:
        print(f"{rel}:{n}: {cols} columns (at most {LIMIT}; .clang-format)")
    print(f"check_line_length: {len(found)} line(s) over {LIMIT} columns")
    return 1 if found else 0


def self_test() -> int:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "ok.cpp").write_text("int x = 0;\n" + "// " + "a" * (LIMIT - 3) + "\n")
        (root / "bad.h").write_text("int y;\n" + "x" * (LIMIT + 1) + "\n")
        got = [(rel, n) for rel in ("ok.cpp", "bad.h") for rel, n, _ in long_lines(root / rel, rel)]
    if got != [("bad.h", 2)]:
        print(f"check_line_length --self-test: expected [('bad.h', 2)], got {got}")
        return 1
    print("check_line_length --self-test: ok")
    return 0


def main(argv) -> int:
    if argv[1:2] == ["--self-test"]:
        return self_test()
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    return check(root, tracked_sources(root))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
