"""test_package.py -- the Python package (issue 55) against the installed wheel: every shipped
graph estimates from Python with the CLI's bytes, summary and plan answer as the commands do,
errors are the CLI's messages as exceptions, nothing is printed, the GIL is released while the
core runs, and `import oomlab` loads no PyTorch. With PyTorch (and torchvision) importable, a
torch.nn.Module estimates through the exporter: torchvision's resnet50 equals the zoo's
resnet50 to the byte, a small custom module round-trips, an nn.LSTM names its module, and
oomlab.train_step's step meets PyTorch's within the parity bar. --by-module's table is the
CLI's and sums to the peak.
Run by scripts/test.sh in a venv with the wheel installed; OOMLAB_BUILD_DIR names the build
whose `oomlab` binary is the reference (default: build).
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

import oomlab

ROOT = Path(__file__).resolve().parents[2]
OOMLAB = ROOT / os.environ.get("OOMLAB_BUILD_DIR", "build") / "oomlab"
GRAPHS = sorted((ROOT / "models" / "graphs").glob("*.json"))
HAS_TORCHVISION = subprocess.run([sys.executable, "-c", "import torchvision"], capture_output=True).returncode == 0


def cli_json(*args):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        r = subprocess.run([str(OOMLAB), *map(str, args), "--json", str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return json.loads(out.read_text())


def test_the_package_is_the_installed_one():
    assert ROOT / "python" not in Path(oomlab.__file__).parents, oomlab.__file__


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda p: p.stem)
def test_every_shipped_graph_estimates_with_the_clis_bytes(graph):
    e = oomlab.estimate(str(graph), batch=2)
    want = cli_json("estimate", "--model", f"graph:{graph}", "--batch", 2)["metrics"]
    assert e.peak_allocated == want["exact"]["peak_allocated_bytes"] > 0
    assert e.peak_reserved == want["exact"]["peak_reserved_bytes"]
    assert e.components["activation"] == want["exact"]["activation_bytes"]
    assert e.results["metrics"]["exact"] == want["exact"]


def test_the_bar_command(monkeypatch):
    monkeypatch.chdir(ROOT)   # issue 55's bar, from a fresh clone's root
    e = oomlab.estimate("models/graphs/resnet50.json", batch=32)
    want = cli_json("estimate", "--model", "graph:models/graphs/resnet50.json", "--batch", 32)
    assert e.peak_allocated == want["metrics"]["exact"]["peak_allocated_bytes"]


def test_flags_and_largest_batch_follow_the_cli():
    e = oomlab.estimate("bert-tiny", batch=8, seq_len=64, amp="bf16", checkpoint="all", optimizer="adamw",
                        device_memory="256MiB")
    want = cli_json("estimate", "--model", "bert-tiny", "--batch", 8, "--seq-len", 64, "--amp", "bf16",
                    "--checkpoint", "all", "--optimizer", "adamw", "--device-memory", "256MiB")
    assert e.results["metrics"]["exact"] == want["metrics"]["exact"]
    assert e.largest_batch == want["metrics"]["largest_batch"]["batch"] > 8
    assert json.loads(e.to_json())["command"] == want["command"]


def test_by_module_is_the_clis_and_sums_to_the_peak():
    e = oomlab.estimate(str(ROOT / "models" / "graphs" / "resnet50.json"), batch=4)
    want = cli_json("estimate", "--model", f"graph:{ROOT / 'models' / 'graphs' / 'resnet50.json'}", "--batch", 4,
                    "--by-module")["metrics"]
    assert e.results["metrics"]["by_module"] == want["by_module"]
    assert sum(row.total for row in e.by_module) == e.peak_allocated
    assert e.peak_frame == want["by_module"]["peak_frame"] != ""
    rows = {row.module: row for row in e.by_module}
    assert rows["fc"].parameters >= 2048 * 1000 * 4 and rows["fc"].optimizer_state == rows["fc"].parameters
    stages = {row.module: row for row in e.by_module_at(1)}
    assert stages["layer1"].total == sum(r.total for m, r in rows.items() if m.startswith("layer1."))
    assert sum(r.total for r in stages.values()) == e.peak_allocated
    assert not oomlab.estimate("resnet20", batch=2, by_module=False).by_module


def test_memory_snapshot_and_chrome_trace_are_the_clis_files(tmp_path):
    snap, trace = tmp_path / "snap.json", tmp_path / "trace.json"
    oomlab.estimate("resnet20", batch=2, memory_snapshot=str(snap), chrome_trace=str(trace))
    assert {"segments", "device_traces"} <= set(json.loads(snap.read_text()))
    assert json.loads(trace.read_text())["traceEvents"]


def test_summary_rows_are_the_clis():
    s = oomlab.summary("resnet20", batch=8)
    want = cli_json("summary", "--model", "resnet20", "--batch", 8)["metrics"]
    assert [r.name for r in s.rows] == [r["name"] for r in want["layers"]]
    assert [r.saved_bytes for r in s.rows] == [r["saved_bytes"] for r in want["layers"]]
    assert s.totals == want["totals"]


def test_plan_recommends_what_the_cli_recommends():
    p = oomlab.plan("resnet20", gpu="t4", global_batch=64)
    want = cli_json("plan", "--model", "resnet20", "--gpu", "t4", "--global-batch", 64)["metrics"]
    assert p.recommended["train_flags"] == want["recommended"]["train_flags"]
    assert p.train_command == "oomlab train " + want["recommended"]["train_flags"]
    assert p.frontier == want["frontier"] and len(p.candidates) == len(want["candidates"])


@pytest.mark.parametrize("call, wanted", [
    (lambda: oomlab.estimate("resnet20", batch=0), "--batch"),
    (lambda: oomlab.estimate("resnet20", batch=8, no_such_flag=3), "--no-such-flag"),
    (lambda: oomlab.estimate("no-such-model", batch=8), "no-such-model"),
    (lambda: oomlab.estimate("/nonexistent/g.json", batch=2), "/nonexistent/g.json"),
    (lambda: oomlab.estimate("resnet20"), "--batch"),
    (lambda: oomlab.estimate(42, batch=2), "int"),
])
def test_bad_input_is_an_input_error_with_the_clis_message(call, wanted):
    with pytest.raises(oomlab.InputError) as err:
        call()
    assert wanted in str(err.value)
    assert isinstance(err.value, ValueError)


def test_the_cli_and_the_package_word_an_error_alike():
    r = subprocess.run([str(OOMLAB), "estimate", "--model", "resnet20", "--batch", "8", "--amp", "fp8"],
                       capture_output=True, text=True)
    with pytest.raises(oomlab.InputError) as err:
        oomlab.estimate("resnet20", batch=8, amp="fp8")
    assert r.stderr.strip() == "oomlab: error: " + str(err.value)


def test_a_graph_with_ops_oomlab_lacks_is_unsupported_ops_error(tmp_path):
    g = json.loads(GRAPHS[0].read_text())
    g["nodes"][3]["op"] = "aten.lstm.input"
    bad = tmp_path / "lstm.json"
    bad.write_text(json.dumps(g))
    with pytest.raises(oomlab.UnsupportedOpsError) as err:
        oomlab.estimate(str(bad), batch=2)
    assert err.value.ops and err.value.ops[0].startswith("aten.lstm.input (node ")
    assert g["nodes"][3]["module"] in err.value.modules


def test_nothing_is_printed(capfd):
    oomlab.estimate("resnet20", batch=8, device_memory="64MiB")
    oomlab.plan("resnet20", gpu="t4", global_batch=32)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_the_gil_is_released_while_the_core_runs():
    done, took = threading.Event(), []

    def work():
        start = time.perf_counter()
        oomlab.plan("resnet50", gpu="a100-80gb", global_batch=256)   # ~1.5 s of meta steps on 2 cores
        took.append(time.perf_counter() - start)
        done.set()

    stamps = [time.perf_counter()]
    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():   # each wake-up needs the GIL
        time.sleep(0.001)
        stamps.append(time.perf_counter())
    t.join()
    gap = max(b - a for a, b in zip(stamps, stamps[1:]))
    # this thread kept running while the core worked (a held GIL stops it for the whole call)
    assert took[0] > 0.2 and gap < took[0] / 4, (gap, took[0])


def test_train_step_needs_a_torch_module():
    with pytest.raises(oomlab.InputError, match="PyTorch|torch.nn.Module"):
        oomlab.train_step("resnet20", None)


def test_import_loads_neither_torch_nor_the_core():
    code = "import sys, oomlab; print('torch' in sys.modules, 'oomlab._core' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.skipif(not HAS_TORCHVISION, reason="PyTorch and torchvision are not importable here")
class TestTorchModules:
    def test_torchvision_resnet50_is_the_zoos_to_the_byte(self):
        import torch
        import torchvision
        e = oomlab.estimate(torchvision.models.resnet50(), torch.randn(2, 3, 224, 224), batch=32)
        zoo = oomlab.estimate("resnet50", batch=32)
        assert e.peak_allocated == zoo.peak_allocated
        assert e.peak_reserved == zoo.peak_reserved

    def test_the_readme_example(self):
        import torch
        import torchvision
        e = oomlab.estimate(torchvision.models.resnet50(), torch.randn(2, 3, 224, 224), batch=64, amp="bf16")
        assert e.batch == 64 and e.peak_allocated > 0
        assert e.results["config"]["amp"] == "bf16"

    def test_a_custom_module_round_trips(self):
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
                self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
                self.head = torch.nn.Linear(16, 10)

            def forward(self, x):
                h = torch.relu(self.conv(x)).flatten(2).transpose(1, 2)   # [B, HW, C]
                h, _ = self.attn(h, h, h, need_weights=False)
                return self.head(h[:, 0])

        net, x = Net(), torch.randn(2, 3, 8, 8)
        e = oomlab.estimate(net, x, batch=4)
        s = oomlab.summary(net, x, batch=4)
        assert e.batch == 4 and e.peak_allocated > 0
        assert {"conv", "head"} <= {r.name for r in s.rows}
        conv = next(r for r in e.by_module if r.module == "conv")   # torch's module paths
        assert conv.parameters == 2048 + 512   # weight 1728 B and bias 64 B, in 512 B blocks

    def test_train_step_matches_pytorch_and_leaves_the_module_alone(self):
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
                self.bn = torch.nn.BatchNorm2d(8)
                self.drop = torch.nn.Dropout(0.5)   # set to 0 on both sides
                self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
                self.head = torch.nn.Linear(8, 5)

            def forward(self, x):
                h = self.drop(torch.relu(self.bn(self.conv(x)))).flatten(2).transpose(1, 2)
                h, _ = self.attn(h, h, h, need_weights=False)
                return self.head(h[:, 0])

        torch.manual_seed(0)
        net, x = Net(), torch.randn(4, 3, 6, 6)
        before = {k: v.clone() for k, v in net.state_dict().items()}
        for dtype in ("float32", "float64"):
            c = oomlab.train_step(net, x, dtype=dtype)
            assert c.passed and c.grad_nmse <= c.bar and c.grad_nmse_worst <= c.bar, c.results
            assert abs(c.loss_oomlab - c.loss_torch) < (1e-5 if dtype == "float32" else 1e-12)
            assert c.weights_after_nmse < c.bar
        assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
        assert json.loads(c.to_json())["meets_bar"] is True

    def test_train_step_on_torchvision_resnet18(self):
        import torch
        import torchvision
        torch.manual_seed(0)
        c = oomlab.train_step(torchvision.models.resnet18(num_classes=10), torch.randn(4, 3, 32, 32),
                              torch.tensor([1, 2, 3, 4]), dtype="float64")
        assert c.passed, c.results

    def test_train_step_refuses_what_it_cannot_compare(self):
        import torch
        with pytest.raises(oomlab.InputError, match="classes"):
            oomlab.train_step(torch.nn.Conv2d(3, 4, 3), torch.randn(2, 3, 8, 8))
        with pytest.raises(oomlab.InputError, match="targets"):
            oomlab.train_step(torch.nn.Linear(4, 3), torch.randn(2, 4), torch.tensor([0, 7]))
        with pytest.raises(oomlab.InputError, match="dtype"):
            oomlab.train_step(torch.nn.Linear(4, 3), torch.randn(2, 4), dtype="float16")

    def test_an_lstm_names_its_module(self):
        import torch

        class Tagger(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(100, 8)
                self.rnn = torch.nn.LSTM(8, 16, batch_first=True)
                self.out = torch.nn.Linear(16, 4)

            def forward(self, ids):
                return self.out(self.rnn(self.emb(ids))[0][:, -1])

        with pytest.raises(oomlab.UnsupportedOpsError) as err:
            oomlab.estimate(Tagger(), torch.ones(2, 5, dtype=torch.int64))
        assert "rnn" in err.value.modules, str(err.value)
