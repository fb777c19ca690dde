"""oomlab from Python: the exact training memory of a model (the meta device's allocator trace,
equal to the CUDA caching allocator's), its per-layer table, and the planner's answer to "what
should I turn on to train this on my card", on the same C++ core as the `oomlab` command:

    import oomlab, torch, torchvision
    e = oomlab.estimate(torchvision.models.resnet50(), torch.randn(2, 3, 224, 224), batch=64, amp="bf16")
    print(e.peak_allocated, e.components)
    print(e.by_module[:5])   # who holds the peak: the largest modules, by category

Importing oomlab needs neither PyTorch nor the C++ module (oomlab.export's exporter runs from
a source tree); the first estimate / summary / plan / train_step loads the module.
"""
from oomlab.errors import InputError, InternalError, OomlabError, OutOfMemoryError, UnsupportedOpsError
from oomlab.results import Estimate, ModuleMemory, Plan, Summary, SummaryRow, TrainStepCheck
from oomlab.api import estimate, plan, summary, train_step

__version__ = "0.1.0"
__all__ = ["estimate", "summary", "plan", "train_step", "Estimate", "ModuleMemory", "Summary", "SummaryRow", "Plan",
           "TrainStepCheck", "OomlabError", "InputError", "UnsupportedOpsError", "OutOfMemoryError", "InternalError"]
