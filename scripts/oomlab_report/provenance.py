"""provenance.py — a committed result comes from a clean tree at a commit in the history
(docs/VERDICTS.md).

provenance_problem(doc, repo) says what is wrong with a results document's `context`
(no git sha, a tree with uncommitted changes, a commit that is not an ancestor of HEAD), or
None. Results that predate this rule and await their rerun are listed, each with its reason,
in provenance_exceptions.json beside the results folder (reports/provenance_exceptions.json for
reports/results/, outside it so that every file in the folder is a result): check_results.py
reports them as pending instead of failing, and fails an entry that no longer needs its
exception (the list only shrinks).

GPU records (reports/results/gpu/<record>/, one folder per GPU session, committed as the
session left it) carry their own provenance.json instead, since what ran there is often a
commit plus a declared local patch: gpu_record_problems(folder, repo) lists what is wrong
with it (none, unreadable, a dry run, no `date` YYYY-MM-DD, no `machine` with `gpu`,
`driver` and `cuda_runtime`, a `commit` that is unknown or not an ancestor of HEAD, a
`dirty` / `oomlab_dirty` tree with no run declaring its local patch, an `oomlab_git` other
than the commit, a run's declared `local_patch` that is not a file of the record, an oomlab
results JSON in the record whose git_sha is another commit, or whose tree was dirty in a run
that declares no local patch), [] when nothing is. The GPU kit's provenance.json
(scripts/gpu_report.py) is written in this format. Standard library and git only.
"""
import json
import re
import subprocess
from pathlib import Path

EXCEPTIONS_FILE = "provenance_exceptions.json"
GPU_PROVENANCE = "provenance.json"
GPU_MACHINE_KEYS = ("gpu", "driver", "cuda_runtime")


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


def gpu_record_problems(folder, repo):
    """[] when the GPU record `folder` has a complete provenance.json that its files agree with,
    else the reasons (see the module's docstring)."""
    folder = Path(folder)
    path = folder / GPU_PROVENANCE
    if not path.is_file():
        return [f"no {GPU_PROVENANCE}: a GPU record says which commit, machine and local patches made it"]
    try:
        prov = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [f"{GPU_PROVENANCE} is not JSON: {exc}"]
    if not isinstance(prov, dict):
        return [f"{GPU_PROVENANCE}: expected an object"]
    problems = []
    if prov.get("dry_run") is True:
        problems.append("a dry run (`dry_run`: oomlab on the meta device): not a GPU measurement")
    if not (isinstance(prov.get("date"), str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", prov["date"])):
        why = prov.get("date_source") if isinstance(prov.get("date_source"), str) else None
        problems.append("no `date` (YYYY-MM-DD) of the run" + (f": {why}" if why else ""))
    machine = prov.get("machine") if isinstance(prov.get("machine"), dict) else {}
    absent = [k for k in GPU_MACHINE_KEYS if not (isinstance(machine.get(k), str) and machine[k])]
    if absent:
        problems.append(f"`machine` lacks {', '.join(absent)}")
    sha = prov.get("commit")
    if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{7,40}", sha)):
        return problems + ["no `commit` (a git sha)"]
    known = _in_history(sha, repo)
    if known is None:
        problems.append("git is not available here to check commit " + sha[:12])
    elif not known:
        problems.append(f"commit {sha[:12]} is unknown or not an ancestor of HEAD")
    runs = prov.get("runs") if isinstance(prov.get("runs"), dict) else {}
    patched = any(isinstance(i, dict) and i.get("local_patch") for i in runs.values())
    if (prov.get("dirty") is True or prov.get("oomlab_dirty") is True) and not patched:
        problems.append("made from a tree with uncommitted changes (`dirty` / `oomlab_dirty`), and no run "
                        "declares its local_patch")
    theirs = prov.get("oomlab_git")
    if isinstance(theirs, str) and not (theirs.startswith(sha) or sha.startswith(theirs)):
        problems.append(f"oomlab reports commit {theirs[:12]} (`oomlab_git`), not the record's commit {sha[:12]}")
    for run, info in sorted(runs.items()):
        patch = info.get("local_patch") if isinstance(info, dict) else None
        if patch is not None and not _file_inside(folder, patch):
            problems.append(f"runs.{run}.local_patch {patch!r} is not a file of the record")
    return problems + _results_problems(folder, sha, runs)


def _file_inside(folder, rel):
    if not isinstance(rel, str) or not rel:
        return False
    target = (folder / rel).resolve()
    return target.is_file() and folder.resolve() in target.parents


def _results_problems(folder, sha, runs):
    """The record's oomlab results JSON against provenance.json: same commit; a dirty tree
    only in a run that declares its local patch."""
    problems = []
    for f in sorted(folder.rglob("*.json")):
        if f.name == GPU_PROVENANCE and f.parent == folder:
            continue
        try:
            ctx = json.loads(f.read_text(encoding="utf-8")).get("context")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            continue   # not an oomlab results document: nothing to compare
        if not isinstance(ctx, dict) or not isinstance(ctx.get("git_sha"), str):
            continue
        rel = f.relative_to(folder).as_posix()
        theirs = ctx["git_sha"]
        if not (theirs.startswith(sha) or sha.startswith(theirs)):
            problems.append(f"{rel}: made at {theirs[:12]}, not at the record's commit {sha[:12]}")
        run = rel.split("/")[0]
        info = runs.get(run) if isinstance(runs.get(run), dict) else {}
        if ctx.get("git_dirty") is True and not info.get("local_patch"):
            problems.append(f"{rel}: made from a tree with uncommitted changes, and provenance.json "
                            f"declares no local_patch for {run}")
    return problems
