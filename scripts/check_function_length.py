#!/usr/bin/env python3
"""check_function_length.py — fails when a C++ function in engine/ or experiments/ is longer
than 80 lines (issue 28: "no function in engine/ or experiments/ longer than 80 lines").

A function's length is counted from the line of its name to the line of its closing brace,
comments and blank lines included (what a reader scrolls through). Functions are found by
a brace scanner over the source with comments, strings and character literals blanked: a
`{` opens a function body when the text since the previous `;`, `{` or `}` ends in a
parameter list `(...)` (optionally followed by const, noexcept, override, final, a
trailing return type or a constructor's initializer list) and is not a control statement
(if, for, while, switch, catch), a lambda (`](...)`) or a class / namespace / enum body.
Lambdas and local classes count towards the function that holds them; a member's braced
initializer in a constructor's initializer list (`: w_{v}`) is not a body.
Usage: python3 scripts/check_function_length.py [--max N] [ROOT]
       python3 scripts/check_function_length.py --self-test
Prints FILE:LINE: NAME is N lines for each offender; exit 1 if any, else 0.
"""
import argparse
import re
import sys
from pathlib import Path

DIRS = ("engine", "experiments")
SUFFIXES = (".cpp", ".h", ".cu", ".cuh")
CONTROL = re.compile(r"\b(if|for|while|switch|catch|else|do|return)\s*$")
NOT_FUNCTION = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$")
NAME = re.compile(r"([~\w:<>]+)\s*\($")
# "X::X(args) : a_(1), b_" before "{": the brace initializer of a member in an init list.
INIT_BRACE = re.compile(r"\)\s*:(?!:)[^;{}]*[\w>]\s*$")


def blank(text):
    """Comments, string and character literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) - i + 1)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def header_name(head):
    """The function name if `head` (text before a `{`) is a function header, else None."""
    h = head.strip()
    if not h or h.startswith("#"):
        return None
    h = re.sub(r"\s+", " ", h)
    # a constructor's initializer list: "X::X(args) : a_(1), b_{2}" -> "X::X(args)"
    m = re.match(r"(.*?\))\s*:(?!:)", h)
    if m and not re.search(r"\?\s*$", m.group(1)):
        h = m.group(1)
    h = re.sub(r"\s*(const|noexcept(\([^)]*\))?|override|final|mutable|->\s*[\w:<>,*& ]+)\s*$", "", h)
    h = re.sub(r"\s*(const|noexcept|override|final)\s*$", "", h)
    if not h.endswith(")"):
        return None
    depth, i = 0, len(h) - 1
    while i >= 0:   # the matching "(" of the final ")"
        depth += h[i] == ")"
        depth -= h[i] == "("
        if depth == 0:
            break
        i -= 1
    before = h[:i].rstrip()
    if i <= 0 or before.endswith("]") or CONTROL.search(before) or NOT_FUNCTION.search(before):
        return None
    if "=" in before.split("(")[0] and "operator" not in before:
        return None   # an initializer: "auto x = f(...) {" does not occur; "T x = {" is not a call
    m = NAME.search(before + "(")
    return m.group(1) if m else None


def functions(text):
    """(name, first line, last line) of every outermost function body in `text`."""
    src = blank(text)
    found, stack, last_break = [], [], 0
    for i, c in enumerate(src):
        if c == "{" and INIT_BRACE.search(src[last_break:i]) and not any(k == "function" for k, *_ in stack):
            stack.append(("init", None, 0))   # a member's braced initializer: the head goes on
        elif c == "{":
            in_function = any(kind == "function" for kind, *_ in stack)
            name = None if in_function else header_name(src[last_break:i])
            if name:
                head_start = last_break + len(src[last_break:i]) - len(src[last_break:i].lstrip())
                stack.append(("function", name, src.count("\n", 0, head_start) + 1))
            else:
                stack.append(("block", None, 0))
            last_break = i + 1
        elif c == "}":
            kind = "block"
            if stack:
                kind, name, first = stack.pop()
                if kind == "function":
                    found.append((name, first, src.count("\n", 0, i) + 1))
            if kind != "init":
                last_break = i + 1
        elif c == ";":
            last_break = i + 1
    return found


def check(root, limit):
    problems = []
    for d in DIRS:
        for path in sorted((root / d).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            for name, first, last in functions(path.read_text(errors="replace")):
                if last - first + 1 > limit:
                    problems.append(f"{rel}:{first}: {name} is {last - first + 1} lines (at most {limit})")
    return problems


def self_test():
    long_body = "\n".join(f"  x += {i};" for i in range(85))
    text = f"""
namespace a {{
struct S {{ int f() const {{ return 1; }} }};
int short_one(int x) {{ if (x) {{ return 1; }} return 0; }}
S::S(int v) : v_(v), w_{{v}} {{
{long_body}
}}
void lambdas() {{ auto g = [](int y) {{ return y; }}; (void)g; }}
}}  // namespace a
// void commented(int x) {{
const char* s = "void not_code() {{";
"""
    found = {name: last - first + 1 for name, first, last in functions(text)}
    want_names = {"f", "short_one", "S::S", "lambdas"}
    ok = set(found) == want_names and found["S::S"] == 87 and found["short_one"] == 1
    print(f"check_function_length self-test: {'ok' if ok else 'FAILED'}: {found}")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    p.add_argument("--max", type=int, default=80)
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    problems = check(Path(a.root), a.max)
    for line in problems:
        print(line)
    print(f"check_function_length: {len(problems)} function(s) over {a.max} lines")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
