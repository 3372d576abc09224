"""Operator hooks on torchvision's resnet18 and on files of samples."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torchvision
from torch import nn

from model_explorer.analysis.hooks import HookError, HookRunner, StopAnalysis, file_samples
from model_explorer.cli import main
from model_explorer.quantization import QuantizedModel


class Recorder:
    """Records every call: (hook, operator, opcode, input shapes, output shape)."""

    def __init__(self) -> None:
        self.events = []

    def StartAnalysis(self) -> None:
        self.events.append(("start",))

    def EndAnalysis(self) -> None:
        self.events.append(("end",))

    def DefaultOpPre(self, name, opcode, inputs) -> None:
        self.events.append(("pre", name, opcode, [i["data"].shape for i in inputs]))

    def DefaultOpPost(self, name, opcode, inputs, output) -> None:
        self.events.append(("post", name, opcode, output["data"].shape if output else None))

    def Conv2DPre(self, name, input, filter, bias, stride, padding, dilation, groups) -> None:
        self.events.append(("pre", name, "Conv2D", input, filter, stride, padding, groups))

    def Conv2DPost(self, name, input, output) -> None:
        self.events.append(("post", name, "Conv2D", output["data"].shape))


def resnet() -> nn.Module:
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).eval()


def run(model: nn.Module, analysis, samples) -> None:
    HookRunner(model, analysis).run(samples)


def opcodes(events, kind="post"):
    return [e[2] for e in events if e[0] == kind]


def test_resnet18_operators_in_execution_order_with_real_shapes() -> None:
    model = resnet()
    x = torch.randn(1, 3, 64, 64)
    convs, inputs = [], []
    handles = [
        m.register_forward_pre_hook(
            lambda m, a, n=n: (convs.append(n), inputs.append(a[0].shape)) and None
        )
        for n, m in model.named_modules()
        if isinstance(m, nn.Conv2d)
    ]
    model(x)
    for handle in handles:
        handle.remove()
    recorder = Recorder()
    run(model, recorder, [(x,)])
    events = recorder.events
    assert events[0] == ("start",) and events[-1] == ("end",)
    posts = opcodes(events)
    assert (
        posts.count("Conv2D") == 20
        and posts.count("FullyConnected") == 1
        and posts.count("Add") == 8
    )
    # Every residual addition belongs to its block; the flatten is the model's own operator.
    adds = [e[1] for e in events if e[0] == "post" and e[2] == "Add"]
    assert adds[0] == "layer1.0/Add#0" and adds[-1] == "layer4.1/Add#0"
    assert "Reshape#0" in [e[1] for e in events if e[0] == "post"]
    # Convolutions in execution order, each seeing its real input.
    pres = [e for e in events if e[0] == "pre" and e[2] == "Conv2D"]
    assert [e[1].split("/")[0] for e in pres] == convs
    assert [tuple(e[3]["data"].shape) for e in pres] == [tuple(s) for s in inputs]
    assert pres[0][4]["name"] == "conv1.weight" and pres[0][5] == [2, 2] and pres[0][6] == [3, 3]
    # Every Pre is followed by the Post of the same operator.
    calls = [e for e in events if e[0] in ("pre", "post")]
    for pre, post in zip(calls[0::2], calls[1::2], strict=True):
        assert (pre[0], post[0], pre[1]) == ("pre", "post", post[1])


def test_default_hooks_alone_see_every_operator() -> None:
    class Defaults:
        def __init__(self) -> None:
            self.names = []

        def DefaultOpPost(self, name, opcode, inputs, output) -> None:
            self.names.append(name)

    model, x = resnet(), torch.randn(1, 3, 64, 64)
    defaults, recorder = Defaults(), Recorder()
    run(model, defaults, [(x,)])
    run(model, recorder, [(x,)])
    assert defaults.names == [e[1] for e in recorder.events if e[0] == "post"]


def test_quantparam_follows_the_quantizers() -> None:
    model = resnet()
    quantized = QuantizedModel(model)
    quantized.calibrate([torch.randn(2, 3, 64, 64)], method="max")
    bits = list(range(2, 16)) * 3
    quantized.bit_widths = bits
    recorder = Recorder()
    run(quantized, recorder, [(torch.randn(1, 3, 64, 64),)])
    pres = [e for e in recorder.events if e[0] == "pre" and e[2] == "Conv2D"]
    assert len(pres) == 20
    layer = quantized.layers["conv1"]
    input_param, filter_param = pres[0][3]["quantparam"], pres[0][4]["quantparam"]
    assert input_param["scale"] == pytest.approx(
        [float(layer.input_quantizer.amax) / (2 ** (bits[0] - 1) - 1)]
    )
    weight_scale = (layer.weight_quantizer.amax / (2 ** (bits[1] - 1) - 1)).tolist()
    assert (
        filter_param["scale"] == pytest.approx(weight_scale)
        and filter_param["quantized_dimension"] == 0
    )
    assert filter_param["zero_point"] == [0] * 64
    assert pres[0][1] == "conv1/Conv2D#0"  # named as in the float model
    # No operator of the quantizers themselves is reported.
    assert not any("quantizer" in e[1] for e in recorder.events if len(e) > 1)


def test_hdf5_and_npz_inputs_give_identical_calls(tmp_path: Path) -> None:
    data = np.random.default_rng(0).normal(size=(3, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "x.npz", images=data)
    np.save(tmp_path / "x.npy", data)
    with h5py.File(tmp_path / "flat.h5", "w") as file:
        file["images"] = data
    with h5py.File(tmp_path / "groups.h5", "w") as file:
        for index, sample in enumerate(data):
            file.create_group(f"sample{index}")["images"] = sample
    model = resnet()
    results = []
    for name in ("x.npz", "x.npy", "flat.h5", "groups.h5"):
        recorder = Recorder()
        run(model, recorder, file_samples(tmp_path / name))
        outputs = [e for e in recorder.events if e[0] == "post"]
        results.append(outputs)
    assert [e[2] for e in results[0]].count("Conv2D") == 3 * 20  # three samples, one at a time
    assert all(r == results[0] for r in results)


class Failing:
    def __init__(self, args: str = "") -> None:
        self.path = Path(args)
        self.seen = 0

    def Conv2DPost(self, name, output) -> None:
        self.seen += 1
        if self.seen == 3:
            raise ZeroDivisionError("planted")

    def EndAnalysis(self) -> None:
        self.path.write_text(f"seen {self.seen}")


def test_a_failing_hook_names_hook_operator_and_line_and_keeps_results(tmp_path: Path) -> None:
    analysis = Failing(str(tmp_path / "out.txt"))
    with pytest.raises(HookError) as error:
        HookRunner(resnet(), analysis, __file__).run([(torch.randn(1, 3, 32, 32),)])
    message = str(error.value)
    expected = "analysis hook Conv2DPost at operator 'layer1.0.conv2/Conv2D#0' failed: "
    assert expected + "ZeroDivisionError: planted" in message
    assert "test_hooks.py, line" in message and 'raise ZeroDivisionError("planted")' in message
    assert (tmp_path / "out.txt").read_text() == "seen 3"  # EndAnalysis still wrote its results


def test_stop_analysis_ends_early() -> None:
    class Stopper:
        def __init__(self) -> None:
            self.samples = 0

        def StartNetworkExecution(self, inputs) -> None:
            self.samples += 1
            if self.samples == 2:
                raise StopAnalysis

    stopper = Stopper()
    done = HookRunner(resnet(), stopper).run([(torch.randn(1, 3, 32, 32),)] * 5)
    assert done == 1 and stopper.samples == 2


def test_analyze_command_with_a_shipped_analysis(trained_digits, tmp_path: Path, capsys) -> None:
    workload_file, _ = trained_digits
    output = tmp_path / "ranges.json"
    status = main(
        [
            "analyze",
            "--workload",
            str(workload_file),
            "--analysis",
            "activation_ranges",
            "--analysis-args",
            str(output),
            "--max-samples",
            "4",
        ]
    )
    assert status == 0 and "ran 4 samples through ActivationRanges" in capsys.readouterr().out
    import json

    ranges = json.loads(output.read_text())
    assert ranges["0/Conv2D#0"]["opcode"] == "Conv2D" and ranges["2/Relu#0"]["min"] == 0.0
    (tmp_path / "bad.py").write_text("class A:\n    pass\nclass B:\n    pass\n")
    assert (
        main(["analyze", "--workload", str(workload_file), "--analysis", str(tmp_path / "bad.py")])
        == 2
    )
    assert "must define exactly one class, it defines 2" in capsys.readouterr().err
    assert main(["analyze", "--print-template"]) == 0
    assert "def Conv2DPre(self, name, input, filter" in capsys.readouterr().out


def test_a_linear_layers_filter_comes_in_its_own_layout() -> None:
    """torch computes a linear layer with its transposed weight; hooks see the weight itself,
    (out, in), with or without a bias (addmm, or mm of a transposed weight)."""

    class Filters:
        def __init__(self) -> None:
            self.seen = []

        def FullyConnectedPre(self, name, input, filter) -> None:  # noqa: A002, N802
            self.seen.append((name, filter["name"], filter["data"]))

    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2, bias=False)).eval()
    filters = Filters()
    run(model, filters, [(torch.randn(1, 4),)])
    assert [(n, w) for n, w, _ in filters.seen] == [
        ("0/FullyConnected#0", "0.weight"),
        ("1/FullyConnected#0", "1.weight"),
    ]
    for (_, _, data), layer in zip(filters.seen, model, strict=True):
        assert np.array_equal(data, layer.weight.detach().numpy())
