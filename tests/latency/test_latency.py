"""Latency tables: the exported graph cut into per-layer segments that compute exactly what
the whole graph computes, each timed as the runtime fuses it (the runtime's own whole-graph
fusion as the oracle), the table's reuse and refusals, and the `latency` objective with the
front timed whole after the search. Timings themselves are noisy on a shared machine: no
assertion here is on a time (benchmarks/bench_latency.py carries the figures)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import yaml

pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")

from onnx.reference import ReferenceEvaluator  # noqa: E402

from conftest import write_workload  # noqa: E402
from model_explorer.cli import main  # noqa: E402
from model_explorer.deployment.export import export_qdq  # noqa: E402
from model_explorer.deployment.runtimes import open_runtime, runtime_setting  # noqa: E402
from model_explorer.errors import UserError  # noqa: E402
from model_explorer.latency.measure import measure_table  # noqa: E402
from model_explorer.latency.segments import inferred, segment_model, segments  # noqa: E402
from model_explorer.latency.table import LatencyTable  # noqa: E402
from model_explorer.latency.timing import interleaved  # noqa: E402
from model_explorer.plan import apply_plan  # noqa: E402
from runtime_probes import default_precision  # noqa: E402
from tests_support import calibrated_digits  # noqa: E402


@pytest.fixture(scope="module")
def digits(trained_digits, tmp_path_factory):  # noqa: ANN001, ANN201
    context, model = calibrated_digits(trained_digits, tmp_path_factory.mktemp("latency"))
    inputs = next(iter(context.batches("exploration")))[0]
    return context, model, inputs


@pytest.fixture(scope="module")
def residual(tmp_path_factory):  # noqa: ANN001, ANN201
    """The project's resnet20 (residual additions, a strided shortcut, average pooling),
    untrained, calibrated on random inputs, at mixed bit widths."""
    from model_explorer.models import create_model
    from model_explorer.quantization import QuantizedModel

    torch.manual_seed(0)
    model = QuantizedModel(create_model("resnet20", in_channels=1).eval())
    x = torch.randn(8, 1, 32, 32)
    model.calibrate([x], "max")
    for index, layer in enumerate(model.layers.values()):
        layer.input_quantizer.num_bits = (8, 6, 8, 4)[index % 4]
        layer.weight_quantizer.num_bits = (8, 4, 5)[index % 3]
    path = tmp_path_factory.mktemp("residual") / "resnet20.onnx"
    export_qdq(model, x[:1], path)
    return model, x, onnx.load(str(path))


def test_segments_hold_every_node_once_and_compute_what_the_whole_graph_computes(residual) -> None:
    """Each segment, run alone on the whole graph's values at its inputs (onnx's reference
    evaluator), gives the whole graph's values at its outputs; the segments and the rest hold
    every node exactly once, the model input's QuantizeLinear the first layer's."""
    model, x, proto = residual
    found, rest = segments(proto, model.layers)
    assert [s.layer for s in found] == list(model.layers)
    held = [node.name for segment in found for node in segment.nodes] + rest
    assert sorted(held) == sorted(node.name for node in proto.graph.node)
    assert not rest and found[0].nodes[0].op_type == "QuantizeLinear"
    tapped = _with_outputs(proto, [o for node in proto.graph.node for o in node.output])
    names = [output.name for output in tapped.graph.output]
    feeds = {"input": x[:2].numpy()}
    values = dict(zip(names, ReferenceEvaluator(tapped).run(None, feeds), strict=True), **feeds)
    typed = inferred(proto)
    for segment in found:
        alone = ReferenceEvaluator(segment_model(proto, segment, typed))
        outputs = alone.run(None, {name: values[name] for name in segment.inputs})
        for name, value in zip(segment.outputs, outputs, strict=True):
            np.testing.assert_array_equal(value, values[name], err_msg=segment.layer)


def _with_outputs(proto: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    known = {o.name for o in copy.graph.output}
    copy.graph.output.extend(
        onnx.helper.make_empty_tensor_value_info(n) for n in names if n not in known
    )
    return copy


def test_a_residual_convolution_segment_holds_the_addition_and_the_next_quantizers(
    residual,
) -> None:
    """What a runtime fuses with a layer: the convolution before a residual addition holds
    the addition, the ReLU after it and the QuantizeLinear of the next block's convolution."""
    model, _, proto = residual
    found = {s.layer: s for s in segments(proto, model.layers)[0]}
    block = found["layers.0.conv2"]
    kinds = [node.op_type for node in block.nodes]
    assert "Add" in kinds and "Relu" in kinds and "QuantizeLinear" in kinds[-2:]
    sites = block.sites(
        {"model.layers.1.conv1.input_quantizer", "model.layers.0.conv2.input_quantizer"}
    )
    assert sites == ["model.layers.0.conv2.input_quantizer", "model.layers.1.conv1.input_quantizer"]


def test_interleaved_timing_runs_every_graph_once_per_round_in_turn() -> None:
    calls: list[str] = []
    timings = interleaved(
        [lambda: calls.append("a"), lambda: calls.append("b")], repeats=4, warmup=1
    )
    assert len(timings) == 2 and all(t.samples == 4 for t in timings)
    rounds = calls[2:]  # after one warm-up call each
    first, second = timings[0].calls + 1, timings[1].calls + 1  # each sample after an untimed call
    assert rounds[:first] == ["a"] * first and rounds[first : first + second] == ["b"] * second
    assert len(rounds) == 4 * (first + second)
    assert all(t.low <= t.median <= t.high for t in timings)


@pytest.fixture(scope="module")
def latency_workload(trained_digits, tmp_path_factory) -> Path:  # noqa: ANN001
    """The default workload searching [accuracy, latency] in onnxruntime at 3 to 8 bits
    (activations: integers clipped or not; weights: INT4, INT8 clipped or not)."""
    folder = tmp_path_factory.mktemp("latency_search")
    workload_file, _ = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    body = data["workload"]
    body["calibration"]["file"] = str(folder / "calibration.pt")
    body["problem"]["objectives"] = ["accuracy", "latency"]
    body["problem"]["num_bits_lower_limit"] = 3
    body["problem"]["latency"] = {"runtime": "onnxruntime", "threads": 1, "repeats": 3}
    body["exploration"]["nsga"].update(pop_size=6, offsprings=6, generations=2)
    workload = write_workload(data, folder / "digits_latency.yaml")
    assert main(["calibrate", str(workload)]) == 0
    return workload


@pytest.fixture(scope="module")
def searched(latency_workload: Path) -> tuple[Path, str]:
    """(result file, what explore printed) of the search, which measures the table first."""
    result_file = latency_workload.with_name("result.pkl")
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        code = main(
            ["explore", str(latency_workload), "--output", str(result_file), "--no-progress"]
        )
    assert code == 0
    return result_file, said.getvalue()


@pytest.fixture(scope="module")
def table(latency_workload: Path, searched) -> LatencyTable:  # noqa: ANN001
    path = latency_workload.parent / "results" / "digits_latency_latency_onnxruntime.json"
    return LatencyTable.load(path, "the search's table")


def test_every_layer_meets_every_combination_of_its_segments_forms(table: LatencyTable) -> None:
    for layer, entry in table.layers.items():
        forms = [
            len(set(table.genes[table.site_genes[s]].values())) if s in table.site_genes else 1
            for s in entry["sites"]
        ]
        assert len(entry["times"]) == int(np.prod(forms)), layer
    assert not table.left_out
    # an activation's 3 to 7 bits are one form (integers clipped to fewer levels), 8 another;
    # a weight's 3 bits are INT4 clipped, 4 INT4, 5 to 7 INT8 clipped
    assert set(table.genes["3.input_quantizer"].values()) == {"UINT8/clip", "UINT8"}
    weights = table.genes["3.weight_quantizer"]
    assert [weights[str(b)] for b in range(3, 9)] == ["INT4/clip", "INT4"] + ["INT8/clip"] * 3 + [
        "INT8"
    ]


def test_the_segments_integer_kernels_are_those_onnxruntime_runs_in_the_whole_graph(
    table: LatencyTable, digits, tmp_path: Path
) -> None:
    """The oracle is onnxruntime's own optimised whole graph: for configurations the table
    never exported, the layers whose segment ran an integer kernel under that configuration's
    forms are the layers onnxruntime runs on integers in the whole exported file."""
    _, model, inputs = digits
    from model_explorer.deployment.runtimes import describe_kernels

    generator = np.random.default_rng(3)
    for trial in range(4):
        plan = {
            layer: {
                "input_bits": int(generator.choice([3, 8])),
                "weight_bits": int(generator.choice([3, 6, 8])),
            }
            for layer in model.layers
        }
        apply_plan(plan, model)
        path = tmp_path / f"plan{trial}.onnx"
        export_qdq(model, inputs[:1], path)
        runtime = open_runtime("onnxruntime", path)
        whole = set(describe_kernels(runtime.kernels(), model.layers)["integer"])
        runtime.deactivate()
        choices = {
            f"{layer}.{r}": str(v)
            for layer, s in plan.items()
            for r, v in (
                ("input_quantizer", s["input_bits"]),
                ("weight_quantizer", s["weight_bits"]),
            )
        }
        segmented = {
            layer
            for layer, entry in table.layers.items()
            if entry["times"][table.key(layer, choices)]["integer"]
        }
        assert segmented == whole, plan


def test_a_table_is_plain_json_and_refused_where_it_was_measured_otherwise(
    table: LatencyTable, tmp_path: Path
) -> None:
    path = table.save(tmp_path / "table.json")
    json.loads(path.read_text())
    loaded = LatencyTable.load(path, "problem.latency.table")
    plan = {layer: {"input_bits": 8, "weight_bits": 3} for layer in table.layers}
    assert loaded.predict(plan) == table.predict(plan)
    loaded.refuse_other(dict(table.machine), {}, "here")
    with pytest.raises(
        UserError, match=r"here: the latency table was measured with threads 1, here it is 2"
    ):
        loaded.refuse_other({**table.machine, "threads": 2}, {}, "here")
    with pytest.raises(UserError, match="not a latency table"):
        path.write_text("{}")
        LatencyTable.load(path, "here")


def test_a_search_on_latency_records_the_front_predicted_and_measured(
    latency_workload: Path, searched, capsys
) -> None:
    from model_explorer.results import ExplorationResult

    result_file, said = searched
    assert (
        "measured_latency" in said and "feasible front members timed whole in onnxruntime" in said
    )
    result = ExplorationResult.load(result_file)
    assert all("latency" in i.values for i in result.individuals)
    front = [i for i in result.pareto_front() if i.feasible]
    for member in front:
        timed = member.extra["latency"]
        assert timed["predicted_ms"] == member.values["latency"] and timed["median_ms"] > 0
    check = result.stats["latency_check"]
    assert check["members"] == len(front)
    # what the measured times can tell apart, counted here from the members' own records
    medians = [m.extra["latency"]["median_ms"] for m in front]
    assert check["span"] == pytest.approx(max(medians) / min(medians) - 1)
    other_order = sum(
        (a.values["latency"] - b.values["latency"])
        * (a.extra["latency"]["median_ms"] - b.extra["latency"]["median_ms"])
        < 0
        for i, a in enumerate(front)
        for b in front[i + 1 :]
    )
    assert check["reversed_pairs"] == other_order
    assert f"the front spans {check['span']:.1%} of the measured time" in said
    # the latency command reuses the matching table
    assert main(["latency", str(latency_workload)]) == 0
    assert "matching table, reused" in capsys.readouterr().out


def test_a_table_measured_elsewhere_is_one_line(latency_workload: Path, searched, capsys) -> None:
    table = latency_workload.parent / "results" / "digits_latency_latency_onnxruntime.json"
    data = json.loads(table.read_text())
    data["machine"]["cpu"] = "another processor"
    elsewhere = table.with_name("elsewhere.json")
    elsewhere.write_text(json.dumps(data))
    assert main(["latency", str(latency_workload), "--output", str(elsewhere)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "measured with cpu 'another processor'" in error[0]


def test_runtimes_that_cannot_time_segments_are_one_line(latency_workload: Path, capsys) -> None:
    assert main(["latency", str(latency_workload), "--runtime", "litert"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "litert" in error[0]
    assert main(["latency", str(latency_workload), "--runtime", "onnxruntime:fastest"]) == 2
    assert "has no setting 'fastest'" in capsys.readouterr().err


def test_choices_the_export_cannot_write_are_left_out_of_their_genes() -> None:
    """A format without an ONNX form (mxfp4) is dropped from a gene's list; a bit width
    outside what was priced narrows a range at its end and is refused inside it."""
    from types import SimpleNamespace

    from model_explorer.operations.latency import leave_out
    from model_explorer.problems.base import Variable

    formats = SimpleNamespace(
        variables=[Variable("a.input_quantizer", 0, 2), Variable("a.weight_quantizer", 0, 1)],
        allowed=[["int4", "int8", "mxfp4"], ["int4", "int8"]],
    )
    priced = {
        "a.input_quantizer": {"int4": "INT4", "int8": "INT8"},
        "a.weight_quantizer": {"int4": "INT4", "int8": "INT8"},
    }
    table = LatencyTable({}, {}, priced, {}, {}, {})
    assert leave_out(formats, table, "here") == ["a.input_quantizer: mxfp4"]
    assert formats.allowed[0] == ["int4", "int8"] and formats.variables[0].upper == 1
    bits = SimpleNamespace(variables=[Variable("a.input_quantizer", 2, 8)], allowed=None)
    table.genes = {"a.input_quantizer": {str(b): "INT8" for b in range(3, 9)}}
    assert leave_out(bits, table, "here") == ["a.input_quantizer: 2"]
    assert (bits.variables[0].lower, bits.variables[0].upper) == (3, 8)
    table.genes = {"a.input_quantizer": {str(b): "INT8" for b in (3, 4, 6, 7, 8)}}
    with pytest.raises(UserError, match="cannot be exported or run at 5 bits, inside its range"):
        leave_out(bits, table, "here")


def test_a_runtime_s_own_profile_is_counted_to_the_segments_holding_its_nodes() -> None:
    """By hand: a node named as an exported node, one named after it with the runtime's
    suffix, a reorder counted to the node it leaves; a node of no segment is counted to none."""
    from model_explorer.latency.profile import attribute

    owner = {"3": "3", "model.7.input_quantizer/Quantize": "3", "7": "7", "7/bias": "7"}
    profile = {
        "3/WithoutBiases": 1.0,
        "model.7.input_quantizer/Quantize_aBcd16b_acdb_7/WithoutBiases": 0.5,
        "7": 2.0,
        "Multiply_1": 0.25,
    }
    assert attribute(profile, owner, ["3", "7"]) == {"3": 1.5, "7": 2.0}


def test_openvino_s_table_reads_each_layer_inside_the_whole_graph(digits) -> None:  # noqa: ANN001
    pytest.importorskip("openvino", reason="the openvino extra is not installed")
    if default_precision("openvino").startswith("unavailable"):
        pytest.skip("OpenVINO cannot run the export's layers on this processor at its defaults")

    _, model, inputs = digits
    runtime, setting = runtime_setting("openvino")
    genes = {gene: [8] for gene in model.explorable_modules}
    table = measure_table(
        model, inputs, genes, lambda: runtime(setting, 1), {"runtime": "openvino"}, {}, repeats=2
    )
    for layer, entry in table.layers.items():
        for timing in entry["times"].values():
            assert timing["in_graph_ms"] > 0, layer
    plan = {layer: {"input_bits": 8, "weight_bits": 8} for layer in table.layers}
    assert table.layer_times(plan) == {
        layer: next(iter(entry["times"].values()))["in_graph_ms"]
        for layer, entry in table.layers.items()
    }


def test_a_form_the_runtime_refuses_leaves_its_gene_with_its_reason(digits) -> None:  # noqa: ANN001
    """A planted fault: a runtime that refuses any graph holding INT4 weights. The 3- and
    4-bit weight choices leave their genes, said with the runtime's words; the rest is priced."""
    from model_explorer.deployment.runtimes.onnxruntime import OnnxRuntime

    class NoInt4(OnnxRuntime):
        def activate(self, path: Path) -> None:
            stored = onnx.load(str(path)).graph.initializer
            if any(t.data_type == onnx.TensorProto.INT4 for t in stored):
                raise UserError("no INT4 kernels here")
            super().activate(path)

    _, model, inputs = digits
    genes = {gene: [4, 8] for gene in model.explorable_modules}
    table = measure_table(model, inputs, genes, lambda: NoInt4("default", 1), {}, {}, repeats=2)
    weights = [gene for gene in genes if gene.endswith("weight_quantizer")]
    for gene in weights:
        assert table.genes[gene] == {"8": "INT8"}
        assert table.left_out[gene] == ["4: the runtime cannot run INT4"]
    assert all(set(table.genes[g]) == {"4", "8"} for g in genes if g not in weights)
    assert any("no INT4 kernels here" in said for said in table.left_out.get("0", []))
    plan = {layer: {"input_bits": 4, "weight_bits": 8} for layer in table.layers}
    assert table.predict(plan) > 0 and table.wholes


def test_a_front_inside_the_timings_spread_is_said_to_be_so() -> None:
    """A latency front spanning 0.7% of the measured time with timings spread 1.2% (the
    measured order reversed) was reported with no word: the sentence says what the times
    cannot tell apart."""
    from model_explorer.reports.text import _separated

    said = _separated({"span": 0.007, "spread": 0.012, "reversed_pairs": 2, "pairs": 3})
    assert said == (
        "; the front spans 0.7% of the measured time, within twice the timings' own spread "
        "(1.2% interquartile): latency does not tell these members apart here; 2 of 3 pairs "
        "measured in the other order than predicted"
    )
    assert _separated({"span": 0.4, "spread": 0.01, "reversed_pairs": 0, "pairs": 3}) == (
        "; the front spans 40.0% of the measured time"
    )
