#!/usr/bin/env python3
"""check_comment_refs.py — fails when a comment names a repository file that does not exist
(a file moved or renamed, its old path still cited in the comments that point to it).

Scanned: the tracked source files (git ls-files; without git, every file under the root but
ignored ones) ending in .cpp .h .cu .cuh .py .sh, and every CMakeLists.txt. Only comment text
is read:
  * C/C++/CUDA: `//` and `/* */` comments (string, character and raw string literals are
    skipped, so a path in code, e.g. an #include or a file name the program opens, is not);
  * Python: `#` comments and docstrings (module, class and function), never other string
    literals: paths the code builds or writes at run time are not references;
  * shell and CMake: `#` comments outside quotes (shell: here-document bodies are skipped).
A reference is a token that looks like a relative file path: at least one `/`, a first folder
that is a top-level folder of the repository (engine kernels experiments models reports
scripts tests docs), and a last component with an extension (`engine/core/dispatch.h`,
`docs/VERDICTS.md`). A token starting with `./` or `../` is a path relative to the file's own
folder. A trailing `:LINE` (`:140`, `:140-150`, `:140:7`) and trailing punctuation are
stripped. A reference resolves when it exists relative to the repository root or to the
folder of the file that names it (tokens starting with `./` also relative to the root), in
the work tree as it is (a file moved but not yet committed counts where it is now).
Not references (to keep false positives low):
  * globs and placeholders: a token containing * ? { } < > [ ] $ % ~ or `...`, and a
    component written as a placeholder (NN, NN_name, XX, X, NAME, FILE, PATH, FAMILY,
    PROFILE-DEVICE, ...: PLACEHOLDER below), so `kernels/<family>.h`, `tests/test_*.cpp`,
    `experiments/NN_name/README.md` and `reports/results/NAME.json` are skipped; brackets
    around a token (`[--json reports/benchmarks/cpu_vs_torch.json]`) are not part of it;
  * URLs (a whitespace-separated word containing `://`, or starting with `www.`) and
    absolute paths;
  * paths under build or output folders, which exist only after a build or a run: a first
    component build* or out, anything under reports/results/local/, and any path git
    ignores (git check-ignore, when the root is a git work tree).
Every missing reference is printed as FILE:LINE: missing reference PATH; the exit status is
1 if there is one, else 0.
Usage: python3 scripts/check_comment_refs.py [REPO_ROOT]
       python3 scripts/check_comment_refs.py --self-test   (a small tree with known good and bad references)
"""
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

TOP = ("engine", "kernels", "experiments", "models", "reports", "scripts", "tests", "docs")
C_SUFFIXES = (".cpp", ".h", ".cu", ".cuh")
SUFFIXES = C_SUFFIXES + (".py", ".sh")
# A run of path-like characters (placeholder and glob characters included, so that a
# placeholder path is seen whole and skipped, not cut into a plausible-looking tail).
RUN = re.compile(r"[\w.+\-/*?{}<>\[\]$%~]+")
GLOB = re.compile(r"[*?{}<>\[\]$%~]|\.\.\.")
# A path component that stands for a name: NN_name, XX, NAME.json, PROFILE-DEVICE, X.md.
PLACEHOLDER = re.compile(r"^(NN|XX+|X|Y|N|NAME|FILE|PATH|DIR|STEM|FAMILY|OP|ID|TAG|TARGET|RECORD|PROFILE|DEVICE|"
                         r"MODEL|RUN|OUT|OUT_DIR)([_.-]|$)")
EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
LINE_SUFFIX = re.compile(r"(:\d+([-:]\d+)?)+$")
BUILD = re.compile(r"^(build[^/]*|out|_deps|CMakeFiles)/|^reports/results/local/")


# ---- comment text of each kind of file: a list of (line number, text) -------------------

def c_comments(text):
    """Comment text of C, C++ and CUDA source, one (line, text) per line of a comment."""
    out, i, n, line = [], 0, len(text), 1
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i + 2:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j
            for k, part in enumerate(text[i + 2:j].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, j)
            i = j + 2
        elif c == '"' and re.search(r"(^|[^\w])(u8|u|U|L)?R$", text[max(0, i - 3):i]):
            m = re.match(r'"([^()\\\s]{0,16})\(', text[i:])   # raw string R"delim( ... )delim"
            if m:
                end = text.find(")" + m.group(1) + '"', i + m.end())
                end = n if end < 0 else end + len(m.group(1)) + 2
                line += text.count("\n", i, end)
                i = end
            else:
                i = skip_quoted(text, i, '"')
        elif c == '"' or (c == "'" and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"))):
            # a ' after a digit or letter is a digit separator (1'000), not a character literal
            j = skip_quoted(text, i, c)
            line += text.count("\n", i, j)
            i = j
        else:
            if c == "\n":
                line += 1
            i += 1
    return out


def skip_quoted(text, i, quote):
    """Index after the literal opened by text[i] == quote (ends at its quote or the line)."""
    j = i + 1
    while j < len(text) and text[j] != quote and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
    return min(j + 1, len(text)) if j < len(text) and text[j] == quote else j


def hash_comments(text, shell):
    """`#` comments outside quotes (shell and CMake); shell here-document bodies skipped."""
    out, quote, heredoc = [], None, None
    for lineno, line in enumerate(text.split("\n"), 1):
        if heredoc is not None:
            if line.strip() == heredoc:   # <<- allows leading tabs; strip() covers both
                heredoc = None
            continue
        i = 0
        while i < len(line):
            c = line[i]
            if quote:
                if c == "\\" and quote == '"':
                    i += 1
                elif c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "\\":
                i += 1
            elif c == "#" and (i == 0 or line[i - 1] in " \t;(" or not shell):
                out.append((lineno, line[i + 1:]))
                break
            i += 1
        if shell and quote is None:   # a here-document (not a here-string <<<, not a shift in $(( )))
            m = re.search(r"(?<!<)<<-?\s*(['\"]?)([A-Za-z_]\w*)\1", line)
            if m and "((" not in line[:m.start()]:
                heredoc = m.group(2)
    return out


def python_comments(text):
    """`#` comments (tokenize) and module / class / function docstrings (ast), by line."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.string[1:]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out
    lines = text.split("\n")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                for ln in range(first.lineno, first.end_lineno + 1):
                    out.append((ln, lines[ln - 1]))
    return sorted(out)


def comments(path: Path, text: str):
    if path.suffix in C_SUFFIXES:
        return c_comments(text)
    if path.suffix == ".py":
        return python_comments(text)
    return hash_comments(text, shell=path.suffix == ".sh")


# ---- references in comment text ---------------------------------------------------------

def clean(run: str) -> str:
    """A path-like run without the sentence around it: enclosing or unbalanced brackets
    ("[--json PATH]"), trailing punctuation and a trailing :LINE ("x.cpp:140." -> x.cpp)."""
    while True:
        before = run
        if run.startswith("[") and run.endswith("]"):
            run = run[1:-1]
        if run.count("[") != run.count("]"):
            run = run.lstrip("[").rstrip("]")
        run = LINE_SUFFIX.sub("", run.rstrip(".,;:-")).rstrip(".,;:-")
        if run == before:
            return run


def references(comment: str):
    """The path tokens of one line of comment text that this checker verifies."""
    for word in comment.split():
        if "://" in word or word.startswith("www."):
            continue
        for run in map(clean, RUN.findall(word)):
            if "/" not in run or run.startswith("/") or GLOB.search(run):
                continue
            parts = run.split("/")
            explicit = parts[0] in (".", "..")
            body = [p for p in parts if p not in (".", "..")]
            if not body or not (explicit or parts[0] in TOP):
                continue
            if not EXTENSION.search(parts[-1]) or any(PLACEHOLDER.match(p) for p in body):
                continue
            yield run


def resolves(root: Path, src: Path, ref: str) -> bool:
    if (src.parent / ref).exists():
        return True
    return not ref.startswith("../") and (root / ref.removeprefix("./")).exists()


def git(root: Path, *args, stdin=None):
    try:
        r = subprocess.run(["git", "-C", str(root), *args], input=stdin, capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return r if r.returncode in (0, 1) else None


def is_work_tree_root(root: Path) -> bool:
    r = git(root, "rev-parse", "--show-toplevel")
    return r is not None and r.returncode == 0 and Path(r.stdout.strip()).resolve() == root.resolve()


def source_files(root: Path):
    r = git(root, "ls-files", "-z") if is_work_tree_root(root) else None
    if r is not None and r.returncode == 0:
        names = r.stdout.split("\0")
    else:
        names = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
        names = [n for n in names if not BUILD.search(n) and not n.startswith(".git/")]
    return sorted(n for n in names if n.endswith(SUFFIXES) or n.rsplit("/", 1)[-1] == "CMakeLists.txt")


def ignored(root: Path, refs):
    """The subset of repository-relative `refs` that git ignores (none without git)."""
    if not refs or not is_work_tree_root(root):
        return set()
    r = git(root, "check-ignore", "--no-index", "--stdin", stdin="\n".join(refs) + "\n")
    return set(r.stdout.split("\n")) if r is not None else set()


def check(root: Path) -> list:
    found = []   # (file, line, ref)
    for rel in source_files(root):
        path = root / rel
        if not path.is_file():   # deleted in the work tree, not yet in the index
            continue
        text = path.read_text(errors="replace")
        for lineno, comment in comments(path, text):
            for ref in references(comment):
                repo_rel = ref.removeprefix("./")
                if BUILD.search(repo_rel) or resolves(root, path, ref):
                    continue
                found.append((rel, lineno, ref))
    skip = ignored(root, sorted({r.removeprefix("./") for _, _, r in found if not r.startswith("../")}))
    return [f"{rel}:{ln}: missing reference {ref}" for rel, ln, ref in found if ref.removeprefix("./") not in skip]


def self_test() -> int:
    """Builds a tiny tree with known good and bad references and checks the verdicts."""
    import tempfile
    files = {
        "engine/core/dispatch.h": "// the kernels: kernels/softmax.h, kernels/cpu/<family>_cpu.cpp\n"
                                  "// see tests/test_gone.cpp:12.\n",                         # bad (line 2)
        "kernels/softmax.h": '/* CPU: kernels/cpu/softmax_cpu.cpp; CUDA:\n   kernels/cuda/softmax.cu */\n'
                             'const char* p = "engine/not_a_comment.h";   // ./softmax.h is here\n',  # bad (2)
        "kernels/cpu/softmax_cpu.cpp": "// half_widen.h, ../softmax.h, ../cuda/missing.cuh (x)\n"    # bad (1)
                                       "int n = 1'000; // https://x.org/engine/core/a.h, engine/*.h\n"
                                       'auto r = R"(// engine/raw.h)"; // experiments/NN_name/README.md\n',
        "scripts/tool.py": '"""tool.py — reads docs/VERDICTS.md and writes reports/results/local/x.json."""\n'
                           'OUT = "reports/results/made_at_run_time.json"\n'
                           "# scripts/gone.sh runs it\n",                                     # bad (3)
        "scripts/run.sh": "#!/bin/sh\n# calls scripts/tool.py, then build/bin/oomlab\n"
                          'echo "# scripts/not_a_comment.sh"  # docs/MISSING.md\n'          # bad (3)
                          "cat <<'EOF'\n# engine/in_heredoc.h\nEOF\n",
        "CMakeLists.txt": "# tests/test_*.cpp name their tier; see scripts/run.sh\n"
                          'set(X "# docs/not_a_comment.md") # models/zoo.h\n',              # bad (2)
        "docs/VERDICTS.md": "",
    }
    want = ["CMakeLists.txt:2: missing reference models/zoo.h",
            "engine/core/dispatch.h:2: missing reference tests/test_gone.cpp",
            "kernels/cpu/softmax_cpu.cpp:1: missing reference ../cuda/missing.cuh",
            "kernels/softmax.h:2: missing reference kernels/cuda/softmax.cu",
            "scripts/run.sh:3: missing reference docs/MISSING.md",
            "scripts/tool.py:3: missing reference scripts/gone.sh"]
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (Path(tmp) / "kernels/cpu/half_widen.h").write_text("")
        found = sorted(check(Path(tmp)))
    if found != want:
        print("check_comment_refs self-test FAILED:\n  flagged " + "\n          ".join(found)
              + "\n  expected " + "\n           ".join(want))
        return 1
    print(f"check_comment_refs self-test: {len(want)} planted missing references found, good ones accepted")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    problems = check(root)
    for p in problems:
        print(p)
    print(f"check_comment_refs: {len(problems)} missing reference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
