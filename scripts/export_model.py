#!/usr/bin/env python3
"""export_model.py -- a PyTorch model to an oomlab graph file (issue 32): the command line of
the Python package's exporter (python/oomlab/export.py: the export and the format's details),
imported from the source tree, so this script runs without `pip install .`.

Usage:
  export_model.py MODEL --input-shape 1,3,224,224 --out FILE.json
                  [--input-dtype float32|int64] [--mode train|eval] [--weights FILE.safetensors]
                  [--static-batch] [--attention-mask]
MODEL is one of
  torchvision:NAME   torchvision.models.NAME(weights=None), e.g. torchvision:resnet50
  hf:NAME            a Hugging Face config built offline: hf:bert (BertConfig(), bert-base's
                     shape, BertForSequenceClassification) or hf:gpt2 (GPT2Config(), GPT2LMHeadModel)
  MODULE:ATTR        your own code: ATTR of the importable MODULE, an nn.Module or a callable
                     returning one (e.g. mypkg.nets:build)
--mode, --static-batch and --attention-mask are export_graph's (python/oomlab/export.py).
Writes FILE.json atomically; --weights also writes the state_dict as safetensors (needs the
safetensors package). Errors are one line `export_model: error: ...` and exit status 2
(no PyTorch included).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))   # python/oomlab
from oomlab.errors import OomlabError  # noqa: E402
from oomlab.export import build_model, export_graph  # noqa: E402
from oomlab_report.atomic import write_json_atomic  # noqa: E402


def writes_to_stdout(path):
    """Whether path is where standard output goes (/dev/stdout, or the file it is redirected to)."""
    import os
    try:
        out, target = os.fstat(sys.stdout.fileno()), os.stat(path)
    except (OSError, ValueError):
        return False
    return (out.st_dev, out.st_ino) == (target.st_dev, target.st_ino)


def die(msg):
    print(f"export_model: error: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="export_model.py", description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--input-shape", required=True, help="comma-separated sizes, batch first")
    p.add_argument("--input-dtype", default="float32", choices=["float32", "int64"])
    p.add_argument("--mode", default="eval", choices=["eval", "train"])
    p.add_argument("--out", required=True)
    p.add_argument("--weights")
    p.add_argument("--static-batch", action="store_true",
                   help="export every size as the example's (default: the batch dim stays symbolic)")
    p.add_argument("--attention-mask", action="store_true",
                   help="a second input, attention_mask [batch, seq] (int64 token models only)")
    a = p.parse_args(argv)
    try:
        a.shape = [int(s) for s in a.input_shape.split(",")]
    except ValueError:
        die(f"--input-shape {a.input_shape!r}: expected comma-separated integers such as 1,3,224,224")
    if not a.shape or any(s <= 0 for s in a.shape):
        die(f"--input-shape {a.input_shape!r}: every size must be positive")
    if a.attention_mask and (a.input_dtype != "int64" or len(a.shape) != 2):
        die("--attention-mask needs token ids: --input-dtype int64 and --input-shape BATCH,SEQ")
    return a


def main(argv):
    args = parse_args(argv)
    try:
        import torch
    except ImportError:
        die("PyTorch is not importable here (pip install torch torchvision transformers)")
    try:
        model = build_model(args.model)
        example = torch.ones(args.shape, dtype=torch.int64) if args.input_dtype == "int64" else torch.randn(args.shape)
        graph = export_graph(model, example, spec=args.model, mode=args.mode, static_batch=args.static_batch,
                             attention_mask=args.attention_mask)
    except OomlabError as e:
        die(str(e))
    write_json_atomic(args.out, graph)
    if args.weights:
        try:
            from safetensors.torch import save_file
        except ImportError:
            die("--weights needs the safetensors package")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, args.weights)
    if not writes_to_stdout(args.out):   # never a line after the JSON on the same stream
        print(f"export_model: wrote {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
