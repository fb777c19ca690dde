"""results.py -- what oomlab's Python API returns: plain dataclasses over the CLI's results JSON
(engine/train/results.h's schema: command, context, config, metrics, memory). Every figure is
the JSON's own (bytes, milliseconds); `.results` keeps the whole document and `.to_json()`
writes it as `oomlab COMMAND --json FILE` would.
"""
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class _Results:
    results: Dict[str, Any] = field(repr=False)

    def to_json(self, **dump_args) -> str:
        return json.dumps(self.results, **dump_args)


@dataclass
class Estimate(_Results):
    """One training step's exact memory on the meta device (`oomlab estimate`): the peak the CUDA
    caching allocator reaches (allocated and reserved bytes, PyTorch's stat names), by component."""
    model: str = ""
    batch: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    components: Dict[str, int] = field(default_factory=dict)   # params, grads, optimizer_state, activations ...
    params: int = 0                                            # parameter count
    step_flops: float = 0.0
    largest_batch: Optional[int] = None                        # with device_memory: the largest that fits

    @classmethod
    def from_results(cls, r):
        m = r["metrics"]
        exact = m["exact"]
        comps = {k[:-len("_bytes")]: v for k, v in exact.items() if k.endswith("_bytes") and not k.startswith("peak_")}
        lb = m.get("largest_batch")
        return cls(results=r, model=r["config"]["model"], batch=m["batch"],
                   peak_allocated=exact["peak_allocated_bytes"], peak_reserved=exact["peak_reserved_bytes"],
                   components=comps, params=m["params"], step_flops=m.get("step_flops", 0.0),
                   largest_batch=lb.get("batch") if isinstance(lb, dict) else None)


@dataclass
class SummaryRow:
    name: str
    type: str
    output_shape: List[int]
    output_values: int
    params: int
    compute_dtype: str
    output_bytes: int
    saved_bytes: int


@dataclass
class Summary(_Results):
    """The per-layer table of `oomlab summary`: each leaf module's output and the bytes it saves
    for backward, and the totals (forward-only and training-forward peaks)."""
    model: str = ""
    batch: int = 0
    rows: List[SummaryRow] = field(default_factory=list)
    totals: Dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_results(cls, r):
        m = r["metrics"]
        rows = [SummaryRow(name=x["name"], type=x["type"], output_shape=list(x["output_shape"]),
                           output_values=x["output_values"], params=x["params"], compute_dtype=x["compute_dtype"],
                           output_bytes=x["output_bytes"], saved_bytes=x["saved_bytes"]) for x in m["layers"]]
        return cls(results=r, model=r["config"]["model"], batch=m["batch"], rows=rows, totals=dict(m["totals"]))

    def to_dataframe(self):
        """The rows as a pandas DataFrame (needs pandas)."""
        import pandas
        return pandas.DataFrame([vars(row) for row in self.rows])


@dataclass
class Plan(_Results):
    """`oomlab plan`'s search: every candidate (techniques, micro-batch, exact peak, predicted step
    time, why it lost), the Pareto frontier (indices into candidates) and the recommendation as an
    `oomlab train` command line and the PyTorch settings that do the same."""
    candidates: List[Dict[str, Any]] = field(default_factory=list)
    frontier: List[int] = field(default_factory=list)
    recommended: Optional[Dict[str, Any]] = None   # the chosen candidate, with train_flags and pytorch
    train_command: Optional[str] = None
    pytorch: Optional[str] = None
    technique_reasons: List[str] = field(default_factory=list)

    @classmethod
    def from_results(cls, r):
        m = r["metrics"]
        rec = m.get("recommended")
        chosen = dict(m["candidates"][rec["candidate"]], **rec) if isinstance(rec, dict) else None
        return cls(results=r, candidates=list(m["candidates"]), frontier=list(m.get("frontier", [])),
                   recommended=chosen, train_command="oomlab train " + rec["train_flags"] if chosen else None,
                   pytorch=rec.get("pytorch") if chosen else None, technique_reasons=list(m.get("technique_reasons", [])))
