"""export.py -- a PyTorch model to an oomlab graph file (issue 32; the format is
engine/io/model_graph.h's "oomlab-graph" version 1), through torch.export decomposed to core
ATen ops: every node with its op, arguments (references to inputs, parameters, buffers and
earlier nodes, or literal values), output shapes and dtypes, and the module path and type
that produced it; parameters and buffers under their state_dict names. A model that uses ops
oomlab lacks is exported anyway: the importer names each missing op and where it occurs.

export_graph(model, example) is what oomlab.estimate / summary / plan run on a torch.nn.Module
and what scripts/export_model.py (the command line) runs; importing this module needs no
PyTorch (export_graph imports it). Errors are oomlab.errors.InputError with one line.

Eval mode (the default) exports the inference graph: BatchNorm appears as
_native_batch_norm_legit_no_training and dropout not at all; the importer maps each node to
the oomlab op that trains (BatchNorm's batch statistics come from the module's mode there).
aten.scaled_dot_product_attention is kept whole (not decomposed to bmm and softmax), so that
the importer runs it as oomlab's attention; so are silu, hardswish and hardsigmoid (their
decompositions save more than eager PyTorch does). The batch dim is exported symbolic
(torch.export.Dim.AUTO; "dynamic_batch": true in the file): sizes that follow the batch are
size nodes (aten.sym_size.int, _operator.mul ...) the importer evaluates for the running batch;
static_batch writes every size as the example's. attention_mask (int64 token inputs): the
model is called as model(input_ids, attention_mask=...), so the graph has a second input and
builds the attention mask from it; the importer derives that input from the ids (id 0 =
padding) and runs the mask as a key padding mask. A parameter tied to another (GPT-2's
transformer.wte.weight is lm_head.weight) is written once, under the name the graph uses;
"exporter": {"tied": {other: used}} records the pair.
"""
import importlib
import math
import operator

from oomlab.errors import InputError

MAX_BUFFER_VALUES = 1 << 20   # engine/io/model_graph.h kMaxBufferValues
DTYPES = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool"}


def _fail(msg):
    raise InputError(msg)


def build_model(spec):
    kind, _, name = spec.partition(":")
    if not name:
        _fail(f"model {spec!r}: expected torchvision:NAME, hf:bert, hf:gpt2 or MODULE:ATTR")
    if kind == "torchvision":
        import torchvision
        if not hasattr(torchvision.models, name):
            _fail(f"torchvision has no model {name!r}")
        return getattr(torchvision.models, name)(weights=None)
    if kind == "hf":
        import transformers as tf
        if name == "bert":
            return tf.BertForSequenceClassification(tf.BertConfig())
        if name == "gpt2":
            return tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False))   # no KV cache in the output
        _fail(f"hf:{name}: this exporter builds hf:bert and hf:gpt2 offline")
    # The user's code may fail anywhere (importing it, building the module): one line, exit 2.
    try:
        obj = getattr(importlib.import_module(kind), name)
    except (ImportError, AttributeError) as e:
        _fail(f"model {spec!r}: {e}")
    except Exception as e:   # noqa: BLE001 -- any error in the user's module top level
        _fail(f"model {spec!r}: importing {kind} failed: {type(e).__name__}: {e}")
    import torch
    if isinstance(obj, torch.nn.Module):
        return obj
    if not callable(obj):
        _fail(f"model {spec!r}: {name} is neither an nn.Module nor a callable returning one")
    try:
        model = obj()
    except Exception as e:   # noqa: BLE001 -- the user's constructor or builder
        _fail(f"model {spec!r}: building it failed: {type(e).__name__}: {e}")
    if not isinstance(model, torch.nn.Module):
        _fail(f"model {spec!r}: {name}() returned {type(model).__name__}, not an nn.Module")
    return model


def dtype_name(dt):
    name = str(dt).replace("torch.", "")
    if name not in DTYPES:
        _fail(f"dtype {name} has no oomlab counterpart")
    return name


def size_hint(s):
    """A size as an int: a symbolic size (the dynamic batch) by its example value."""
    return s if isinstance(s, int) else int(s.node.hint)


def tensor_spec(val):
    return {"shape": [size_hint(s) for s in val.shape], "dtype": dtype_name(val.dtype)}


def output_specs(node):
    import torch
    val = node.meta.get("val")
    vals = val if isinstance(val, (tuple, list)) else [val]
    specs = [tensor_spec(v) if isinstance(v, torch.Tensor)
             else {"shape": [], "dtype": "int64"} if isinstance(v, (int, torch.SymInt))   # a size
             else {"shape": [0], "dtype": "float32"} for v in vals]
    return specs or [{"shape": [0], "dtype": "float32"}]


def convert(a, names):
    import torch
    if isinstance(a, torch.fx.Node):
        return {"ref": names[a.name]}
    if isinstance(a, (list, tuple)):
        return [convert(x, names) for x in a]
    if isinstance(a, float) and not math.isfinite(a):   # JSON has no inf or nan
        return {"float": "nan" if math.isnan(a) else ("inf" if a > 0 else "-inf")}
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    if isinstance(a, torch.dtype):
        return dtype_name(a)
    return str(a)   # devices, layouts, memory formats


def op_name(target):
    """aten ops by their overload name; Python's size arithmetic as _operator.mul etc."""
    if target is operator.getitem:
        return "getitem"
    if getattr(target, "__module__", None) == "_operator":
        return f"_operator.{target.__name__}"
    return str(target)


def module_stack(node):
    """[(path, type)] from the outermost module to the one that produced the node."""
    out = []
    for path, typ in (node.meta.get("nn_module_stack") or {}).values():
        typ = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
        out.append((path.replace("L['self'].", "").replace("L__self___", ""), typ.rsplit(".", 1)[-1]))
    return out


def module_of(node):
    stack = module_stack(node)
    return stack[-1] if stack else ("", "")


def graph_of(ep, spec, mode, shape, input_dtype):
    import torch
    from torch.export.graph_signature import InputKind
    names, inputs, params, tied = {}, [], [], {}
    state = dict(ep.state_dict)
    state.update(getattr(ep, "constants", {}) or {})
    used = {a.name for n in ep.graph.nodes for a in n.all_input_nodes}
    owner = {}   # storage -> the parameter the graph uses it under
    for s in ep.graph_signature.input_specs:
        if s.kind == InputKind.PARAMETER and s.arg.name in used:
            owner.setdefault(state[s.target].untyped_storage().data_ptr(), s.target)
    for s in ep.graph_signature.input_specs:
        if s.kind == InputKind.USER_INPUT:
            names[s.arg.name] = s.arg.name
        elif s.kind == InputKind.PARAMETER and s.arg.name not in used and \
                state[s.target].untyped_storage().data_ptr() in owner:   # a tied weight (GPT-2's wte = lm_head)
            tied[s.target] = owner[state[s.target].untyped_storage().data_ptr()]
        elif s.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            names[s.arg.name] = s.target
            t = state[s.target]
            entry = {"name": s.target, **tensor_spec(t),
                     "kind": "parameter" if s.kind == InputKind.PARAMETER else "buffer"}
            if s.kind == InputKind.BUFFER and getattr(s, "persistent", True) is False:
                entry["persistent"] = False   # outside the state_dict (Hugging Face's position ids)
            if s.kind == InputKind.BUFFER and not t.is_floating_point() and t.numel() <= MAX_BUFFER_VALUES:
                entry["values"] = [int(x) for x in t.flatten().tolist()]   # position ids: indices, not weights
            params.append(entry)
        else:
            _fail(f"input {s.arg.name!r} of kind {s.kind}: not supported by format version 1")
    nodes, outputs = [], []
    for n in ep.graph.nodes:
        if n.op == "placeholder" and names.get(n.name) == n.name:
            inputs.append({"name": n.name, **tensor_spec(n.meta["val"])})
        elif n.op == "call_function":
            names[n.name] = n.name
            mod, typ = module_of(n)
            node = {"name": n.name, "op": op_name(n.target),
                    "args": convert(list(n.args), names), "outputs": output_specs(n), "module": mod, "module_type": typ}
            if n.kwargs:
                node["kwargs"] = {k: convert(v, names) for k, v in n.kwargs.items()}
            nodes.append(node)
        elif n.op == "output":
            outputs = [convert(a, names) for a in n.args[0]]
    batch = inputs[0]["name"] if inputs else None
    dynamic = any(n.op == "placeholder" and n.name == batch and not isinstance(n.meta["val"].shape[0], int)
                  for n in ep.graph.nodes)
    modules = {p: t for n in ep.graph.nodes if n.op == "call_function" for p, t in module_stack(n)
               if p and not p.startswith("_")}   # (torch's own hook frames aside)
    return {"format": "oomlab-graph", "version": 1, "dynamic_batch": dynamic, "modules": modules,
            "exporter": {"tool": "scripts/export_model.py", "torch": torch.__version__, "model": spec,
                         "mode": mode, "input_shape": shape, "input_dtype": input_dtype,
                         "tied": tied},
            "inputs": inputs, "parameters": params, "nodes": nodes, "outputs": outputs}


def decomposition_table():
    """Core ATen, but scaled_dot_product_attention stays one node (the importer runs it as
    oomlab's attention, eager or fused) and so do silu, hardswish and hardsigmoid (one op
    saving its input, as eager PyTorch runs them, not sigmoid / clamp / mul pieces that save more)."""
    import torch
    table = torch.export.default_decompositions()
    for op in (torch.ops.aten.scaled_dot_product_attention.default, torch.ops.aten.silu.default,
               torch.ops.aten.hardswish.default, torch.ops.aten.hardsigmoid.default):
        table.pop(op, None)
    return table


def export_graph(model, example, *, spec=None, mode="eval", static_batch=False, attention_mask=False):
    """The graph of `model` (a torch.nn.Module) called on `example` (one tensor, batch first), as a
    dict in the file format; `spec` names the model in the file's exporter block (default: its
    class). The model is put in `mode` for the export and left there."""
    import torch
    if not isinstance(model, torch.nn.Module):
        _fail(f"export: expected a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example, torch.Tensor) or example.dim() == 0:
        _fail("export: the example input must be a tensor with a batch dim, e.g. torch.randn(2, 3, 224, 224)")
    input_dtype = str(example.dtype).replace("torch.", "")
    if input_dtype not in ("float32", "int64"):
        _fail(f"export: example input of dtype {input_dtype}: oomlab graphs take float32 images or int64 token ids")
    if attention_mask and (input_dtype != "int64" or example.dim() != 2):
        _fail("export: attention_mask needs token ids: an int64 example of shape [batch, seq]")
    model.train(mode == "train")
    kwargs, dynamic = {}, None if static_batch else ({0: torch.export.Dim.AUTO},)
    if attention_mask:
        kwargs = {"attention_mask": torch.ones(example.shape, dtype=torch.int64)}
        if not static_batch:   # one batch symbol for both inputs
            batch = torch.export.Dim("batch")
            dynamic = {"input_ids": {0: batch}, "attention_mask": {0: batch}}
    spec = spec or f"{type(model).__module__}.{type(model).__qualname__}"
    try:
        ep = torch.export.export(model, (example,), kwargs, dynamic_shapes=dynamic).run_decompositions(
            decomposition_table())
    except Exception as e:   # torch.export's own errors: unsupported Python, data-dependent control flow
        _fail(f"torch.export failed for {spec}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return graph_of(ep, spec, mode, list(example.shape), input_dtype)
