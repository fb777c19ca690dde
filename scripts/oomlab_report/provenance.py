"""provenance.py — a committed result comes from a clean tree at a commit in the history
(DESIGN.md section 11).

provenance_problem(doc, repo) says what is wrong with a results document's `context`
(no git sha, a tree with uncommitted changes, a commit that is not an ancestor of HEAD), or
None. Results that predate this rule and await their rerun are listed, each with its reason,
in provenance_exceptions.json beside the results folder (reports/provenance_exceptions.json for
reports/results/, outside it so that every file in the folder is a result): check_results.py
reports them as pending instead of failing, and fails an entry that no longer needs its
exception (the list only shrinks). Standard library and git only.
"""
import json
import subprocess
from pathlib import Path

EXCEPTIONS_FILE = "provenance_exceptions.json"


def _in_history(sha, repo):
    try:
        r = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", sha, "HEAD"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None  # no git: cannot tell
    if r.returncode in (0, 1):
        return r.returncode == 0
    return False  # 128: an unknown commit


def provenance_problem(doc, repo):
    """None when `doc` comes from a clean tree at a commit in repo's history, else the reason."""
    ctx = doc.get("context") if isinstance(doc.get("context"), dict) else {}
    sha = ctx.get("git_sha")
    if not isinstance(sha, str) or len(sha) < 7 or sha == "unknown":
        return "no git commit in context.git_sha"
    if ctx.get("git_dirty") is not False:
        return f"made from a tree with uncommitted changes at {sha[:12]} (context.git_dirty)"
    known = _in_history(sha, repo)
    if known is None:
        return "git is not available here to check commit " + sha[:12]
    if not known:
        return f"commit {sha[:12]} is not in this repository's history"
    return None


def load_exceptions(results_dir):
    """{file name: reason} from the provenance_exceptions.json beside results_dir ({} when absent)."""
    path = Path(results_dir).resolve().parent / EXCEPTIONS_FILE
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError(f"{path}: expected an object of file name -> reason")
    return data
