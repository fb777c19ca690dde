"""results.py -- what oomlab's Python API returns: plain dataclasses over the CLI's results JSON
(engine/train/results.h's schema: command, context, config, metrics, memory). Every figure is
the JSON's own (bytes, milliseconds); `.results` keeps the whole document and `.to_json()`
writes it as `oomlab COMMAND --json FILE` would (train_step's: the parity scripts' point).
"""
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class _Results:
    results: Dict[str, Any] = field(repr=False)

    def to_json(self, **dump_args) -> str:
        return json.dumps(self.results, **dump_args)


_CATEGORIES = ("parameters", "buffers", "gradients", "optimizer_state", "inputs", "activations", "backward", "other")


@dataclass
class ModuleMemory:
    """One module's bytes at the step's peak (`oomlab estimate --by-module`), by category:
    its parameters, buffers, gradients and optimizer state (block-rounded, as the allocator
    holds them), the batch (inputs, under "input"), what its forward saved (activations),
    what its backward holds (backward), and anything else allocated under its name (other)."""
    module: str
    parameters: int
    buffers: int
    gradients: int
    optimizer_state: int
    inputs: int
    activations: int
    backward: int
    other: int
    total: int

    @classmethod
    def from_json(cls, row):
        return cls(module=row["module"], total=row["total_bytes"], **{c: row[c + "_bytes"] for c in _CATEGORIES})


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
    by_module: List[ModuleMemory] = field(default_factory=list)   # who holds the peak, largest first
    peak_frame: str = ""                                       # "layer/phase" of the allocation that reached it

    @classmethod
    def from_results(cls, r):
        m = r["metrics"]
        exact = m["exact"]
        comps = {k[:-len("_bytes")]: v for k, v in exact.items() if k.endswith("_bytes") and not k.startswith("peak_")}
        lb = m.get("largest_batch")
        owners = m.get("by_module", {})
        return cls(results=r, model=r["config"]["model"], batch=m["batch"],
                   peak_allocated=exact["peak_allocated_bytes"], peak_reserved=exact["peak_reserved_bytes"],
                   components=comps, params=m["params"], step_flops=m.get("step_flops", 0.0),
                   largest_batch=lb.get("batch") if isinstance(lb, dict) else None,
                   by_module=[ModuleMemory.from_json(row) for row in owners.get("modules", [])],
                   peak_frame=owners.get("peak_frame", ""))

    def by_module_at(self, depth):
        """by_module summed up to the first `depth` components of each path ("layer1.0.conv1" at
        depth 1 is "layer1"), largest first."""
        sums = {}
        for row in self.by_module:
            key = ".".join(row.module.split(".")[:depth])
            acc = sums.setdefault(key, dict.fromkeys(_CATEGORIES + ("total",), 0))
            for name in acc:
                acc[name] += getattr(row, name)
        rows = [ModuleMemory(module=key, **acc) for key, acc in sums.items()]
        return sorted(rows, key=lambda r: -r.total)

    def modules_dataframe(self, depth=None):
        """by_module (or by_module_at(depth)) as a pandas DataFrame (needs pandas)."""
        import pandas
        return pandas.DataFrame([vars(row) for row in (self.by_module if depth is None else self.by_module_at(depth))])


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


@dataclass
class TrainStepCheck(_Results):
    """oomlab.train_step's comparison of one SGD step with PyTorch's (oomlab.parity): the losses,
    the NMSE of the logits, of all gradients together and of the worst tensor (by name), of
    the weights after the update, and whether the gradients meet the bar (1e-6 in float32,
    1e-10 in float64). `.results` is the whole point, as scripts/graph_parity.py writes it."""
    dtype: str = ""
    loss_oomlab: float = 0.0
    loss_torch: float = 0.0
    logits_nmse: float = 0.0
    grad_nmse: float = 0.0
    grad_nmse_worst: float = 0.0
    grad_nmse_worst_tensor: str = ""
    weights_after_nmse: float = 0.0
    bar: float = 0.0
    passed: bool = False

    @classmethod
    def from_point(cls, p):
        return cls(results=p, dtype=p["dtype"], loss_oomlab=p["loss_oomlab"], loss_torch=p["loss_torch"],
                   logits_nmse=p["logits_nmse"], grad_nmse=p["grad_nmse"], grad_nmse_worst=p["grad_nmse_worst"],
                   grad_nmse_worst_tensor=p["grad_nmse_worst_tensor"], weights_after_nmse=p["weights_after_nmse"],
                   bar=p["bar_grad_nmse"], passed=p["meets_bar"])
