"""experiments.py — the experiment folders, experiments/NN_name/, each one whole question:
  experiment.json      the spec the runner expands into points (oomlab run FOLDER);
  README.md            the question, the source's figure and how to read ours;
  driver.cpp           its summary and verdict (optional: without one the runner's generic
                       driver summarises the points and the verdict is
                       "inconclusive": nothing judged the claim);
  summary.schema.json  the contract between driver and renderer (schema.py; optional);
  report.py            its REPORT.md section (optional: without one, the generic section):
                       render(doc, out_dir) -> (markdown, figure paths relative to out_dir),
                       drawing exactly FIGURES (a list of such paths).
discover() finds every folder holding an experiment.json; nothing here names an experiment.
A spec that is not JSON, or a report.py without render/FIGURES, is an ExperimentError naming
the file.
"""
import importlib.util
import json
from pathlib import Path

from oomlab_report.results import REPO_ROOT

DEFAULT_DIR = REPO_ROOT / "experiments"


class ExperimentError(Exception):
    pass


class Experiment:
    def __init__(self, folder):
        self.folder = Path(folder)
        self.name = self.folder.name
        self.spec = _read_json(self.folder / "experiment.json")
        schema_path = self.folder / "summary.schema.json"
        self.schema = _read_json(schema_path) if schema_path.exists() else None
        self.report_path = self.folder / "report.py"
        self._renderer = None

    @property
    def title(self):
        return self.spec.get("title", "")

    def renderer(self):
        """The folder's report.py as a module, or None when it has none."""
        if self._renderer is None and self.report_path.exists():
            self._renderer = _load_renderer(self.report_path, self.name)
        return self._renderer

    def figures(self):
        r = self.renderer()
        return list(r.FIGURES) if r else []


def _read_json(path):
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ExperimentError(f"{path}: not readable JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ExperimentError(f"{path}: top level is not an object")
    return doc


def _load_renderer(path, name):
    module_name = "oomlab_experiment_" + "".join(c if c.isalnum() else "_" for c in name)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ExperimentError(f"{path}: cannot load: {type(exc).__name__}: {exc}") from exc
    figures = getattr(module, "FIGURES", None)
    if not callable(getattr(module, "render", None)):
        raise ExperimentError(f"{path}: defines no render(doc, out_dir)")
    if not isinstance(figures, list) or not all(isinstance(f, str) for f in figures):
        raise ExperimentError(f"{path}: FIGURES must be a list of paths relative to the report")
    return module


def discover(exp_dir=DEFAULT_DIR):
    """{name: Experiment} for every folder of exp_dir holding an experiment.json ({} when
    exp_dir does not exist)."""
    exp_dir = Path(exp_dir)
    if not exp_dir.is_dir():
        return {}
    return {spec.parent.name: Experiment(spec.parent)
            for spec in sorted(exp_dir.glob("*/experiment.json"))}


def summary_schema(name, exp_dir=DEFAULT_DIR):
    """The summary schema experiments/<name>/ declares, or None."""
    path = Path(exp_dir) / name / "summary.schema.json"
    return _read_json(path) if path.exists() else None
