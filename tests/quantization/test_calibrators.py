"""Calibrators against the data they saw and against brute-force versions of their rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import entropy as kl_divergence
from torch import nn

from model_explorer.errors import UserError
from model_explorer.quantization import MaxCalibrator, QuantizedModel, make_calibrator
from model_explorer.quantization.calibrators import calibrator_from_state


def batches_with_outliers(seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    batches = [torch.randn(20_000, generator=generator) for _ in range(3)]
    batches[1][:5] = torch.tensor([25.0, -30.0, 28.0, 40.0, -22.0])  # rare, far outliers
    return batches


def collected(calibrator, batches):
    for batch in batches:
        calibrator.collect(batch)
    return calibrator


def test_max_is_the_true_max_per_tensor_and_per_channel() -> None:
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randn(4, 3, 5, generator=generator) * (i + 1) for i in range(3)]
    everything = torch.cat(batches)
    assert collected(MaxCalibrator(), batches).compute_amax(8) == everything.abs().max()
    per_channel = collected(MaxCalibrator(axis=1), batches).compute_amax(8)
    assert torch.equal(per_channel, everything.abs().amax(dim=(0, 2)))
    assert collected(MaxCalibrator(), batches).min_value == float(everything.min())


@pytest.mark.parametrize("method", ["percentile", "entropy", "mse"])
def test_histogram_methods_clip_rare_outliers(method: str) -> None:
    batches = batches_with_outliers()
    true_max = max(float(b.abs().max()) for b in batches)
    amax = float(collected(make_calibrator(method), batches).compute_amax(8))
    assert 0 < amax <= true_max
    if method != "mse":  # mse may keep outliers when levels are fine; entropy/percentile clip
        assert amax < 0.5 * true_max


def test_percentile_agrees_with_numpy_within_a_bin() -> None:
    batches = batches_with_outliers()
    calibrator = collected(make_calibrator("percentile", percentile=99.0), batches)
    values = torch.cat(batches).abs().numpy()
    assert (
        abs(float(calibrator.compute_amax(8)) - np.percentile(values, 99.0)) <= calibrator.bin_width
    )


def test_histogram_grows_with_later_batches_and_keeps_every_count() -> None:
    small, large = torch.randn(1000) * 0.1, torch.randn(1000) * 5
    calibrator = collected(make_calibrator("percentile", percentile=100.0), [small, large])
    assert calibrator.histogram.sum() == 2000
    top = float(torch.cat([small, large]).abs().max())
    assert top <= float(calibrator.compute_amax(8)) <= top + calibrator.bin_width
    # A far outlier merges bins instead of growing the histogram without bound.
    calibrator.collect(torch.tensor([1e6]))
    assert len(calibrator.histogram) <= calibrator.max_bins
    assert calibrator.histogram.sum() == 2001


def brute_force_mse(
    counts: np.ndarray, width: float, bits: int, start_bin: int, unsigned: bool = False
) -> float:
    """For every candidate edge, quantize each bin centre and weigh its squared error by the
    bin's count; return the edge with the least error (an unsigned grid has twice the levels
    of a signed one over [0, amax])."""
    bound = 2 ** (bits - 1 + int(unsigned)) - 1
    best, best_error = None, np.inf
    for stop in range(start_bin, len(counts) + 1):
        amax = stop * width
        error = 0.0
        for index, count in enumerate(counts):
            if count:
                centre = (index + 0.5) * width
                level = min(round(centre * bound / amax), bound)
                error += count * (centre - level * amax / bound) ** 2
        if error < best_error:
            best, best_error = amax, error
    return best


@pytest.mark.parametrize("bits", [3, 5])
def test_mse_prices_an_unsigned_quantizer_on_its_own_grid(bits: int) -> None:
    """After a ReLU (unsigned), the levels span [0, amax] twice as finely: the error, and so
    the amax that minimises it, is that grid's, as a brute force over it finds."""
    batches = [torch.cat(batches_with_outliers()).abs()]
    calibrator = collected(make_calibrator("mse", num_bins=256, start_bin=16), batches)
    counts = calibrator.histogram.numpy()
    unsigned = brute_force_mse(counts, calibrator.bin_width, bits, 16, unsigned=True)
    assert unsigned != brute_force_mse(counts, calibrator.bin_width, bits, 16)
    chosen = float(calibrator.compute_amax(bits, unsigned=True))
    assert chosen == pytest.approx(unsigned, rel=1e-6)


@pytest.mark.parametrize("bits", [3, 5])
def test_mse_minimises_the_quantization_error_among_its_candidates(bits: int) -> None:
    batches = [torch.cat(batches_with_outliers())]  # one batch: exactly 256 bins, all candidates
    calibrator = collected(make_calibrator("mse", num_bins=256, start_bin=16), batches)
    counts = calibrator.histogram.numpy()
    expected = brute_force_mse(counts, calibrator.bin_width, bits, 16)
    assert float(calibrator.compute_amax(bits)) == pytest.approx(expected, rel=1e-6)
    # On the data itself, the chosen amax quantizes better than the plain max.
    data = torch.cat(batches)
    chosen = calibrator.compute_amax(bits)
    maximum = data.abs().max()

    def error(amax):
        from model_explorer.quantization import fake_quantize

        return float(((fake_quantize(data, amax, bits) - data) ** 2).mean())

    assert error(chosen) < error(maximum)


def brute_force_entropy(counts: np.ndarray, width: float, bits: int, start_bin: int) -> float:
    """TensorRT's rule written out plainly: P = bins below the candidate with the rest added
    to the last one; Q = those bins (without the rest) merged into 2**(bits-1) groups and
    spread evenly over the bins where P is non-zero; pick the candidate with the least KL(P||Q)."""
    levels = 2 ** (bits - 1)
    best, best_divergence = None, np.inf
    for stop in range(max(start_bin, levels), len(counts) + 1):
        p = counts[:stop].astype(float).copy()
        p[-1] += counts[stop:].sum()
        q = np.zeros(stop)
        groups = np.array_split(np.arange(stop), levels)
        for group in groups:
            mass = counts[group].sum()
            targets = [i for i in group if p[i] > 0]
            for i in targets:
                q[i] = mass / len(targets)
        if q.sum() == 0 or np.any((p > 0) & (q == 0)):
            continue
        divergence = kl_divergence(p, q)
        if divergence < best_divergence:
            best, best_divergence = stop * width, divergence
    return best


@pytest.mark.parametrize("bits", [4, 6])
def test_entropy_follows_the_kl_rule(bits: int) -> None:
    batches = [torch.cat(batches_with_outliers(seed=3))]
    calibrator = collected(make_calibrator("entropy", num_bins=512, start_bin=32), batches)
    counts = calibrator.histogram.numpy()
    expected = brute_force_entropy(counts, calibrator.bin_width, bits, 32)
    assert float(calibrator.compute_amax(bits)) == pytest.approx(expected, rel=1e-6)


def test_state_round_trip_keeps_the_histogram_not_the_data() -> None:
    batches = batches_with_outliers()
    for method in ("max", "percentile", "mse", "entropy"):
        calibrator = collected(make_calibrator(method), batches)
        state = calibrator.state()
        restored = calibrator_from_state(state)
        for bits in (4, 8):
            assert torch.equal(restored.compute_amax(bits), calibrator.compute_amax(bits))
        # The state is the same size after five times more data: statistics, not samples.
        more = collected(make_calibrator(method), batches * 5).state()

        def size(state):
            return sum(v.numel() for v in state.values() if isinstance(v, torch.Tensor))

        assert size(more) == size(state)


def test_histogram_methods_are_per_tensor_only() -> None:
    with pytest.raises(ValueError, match="per tensor only"):
        make_calibrator("entropy", axis=0)


# -- each method's own options --------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, options, words",
    [
        ("mse", {"percentile": 99.9}, "only the percentile calibrator takes 'percentile', not mse"),
        (
            "max",
            {"num_bins": 1024},
            "only the entropy, mse and percentile calibrators take 'num_bins', not max",
        ),
        ("percentile", {"start_bin": 64}, "only the entropy and mse calibrators take 'start_bin'"),
        ("mse", {"start_bins": 64}, "takes no option 'start_bins' (did you mean 'start_bin'?)"),
        ("percentile", {"percentile": 150}, "percentile must be a percentage above 0"),
        ("histogram", {}, "unknown calibrator 'histogram'"),
    ],
)
def test_an_option_the_method_does_not_take_is_one_line(method, options, words) -> None:
    with pytest.raises(UserError) as error:
        make_calibrator(method, **options)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_a_quantized_model_calibrates_with_its_methods_options() -> None:
    quantized = QuantizedModel(nn.Sequential(nn.Linear(4, 2)))
    x = torch.tensor([[0.5, -3.0, 1.0, 2.0], [0.0, 1.5, -0.25, 2.5]])
    quantized.calibrate([x], method="percentile", percentile=100.0, num_bins=16)
    quantizer = quantized.layers["0"].input_quantizer
    assert len(quantizer.calibrator.histogram) == 16  # num_bins reached the calibrator
    # Percentile 100 keeps every value: amax is the upper edge of the bin of the largest |x|,
    # which sets the bin width (3.0 / 16), so amax is 3.0 itself.
    assert float(quantizer.amax) == pytest.approx(3.0)
    with pytest.raises(UserError, match="calibrate: only the percentile calibrator takes"):
        quantized.calibrate([x], method="mse", percentile=99.9)
    quantized.calibrate([x], method="mse", num_bins=16, start_bin=4)
    assert quantized.layers["0"].input_quantizer.calibrator.options.start_bin == 4


def test_states_written_before_the_registry_still_load() -> None:
    # Calibration files (version 3) stored every histogram option whatever the method.
    old = {"num_bins": 4, "percentile": 99.99, "start_bin": 1, "bin_width": 1.0, "min": -3.5}
    at_the_top = torch.tensor([0.0, 0.0, 0.0, 10.0], dtype=torch.float64)
    mse = calibrator_from_state({"method": "mse", **old, "histogram": at_the_top})
    assert (mse.options.num_bins, mse.options.start_bin, mse.min_value) == (4, 1, -3.5)
    # Every value sits at the centre 3.5: an amax of 1, 2 or 3 clips it by at least 0.5, while
    # 4 puts a level within 4/127 of it.
    assert float(mse.compute_amax(8)) == 4.0
    halves = torch.tensor([0.0, 10.0, 0.0, 10.0], dtype=torch.float64)
    state = {"method": "percentile", **old, "percentile": 50.0, "histogram": halves}
    # Half the values lie in the second bin, below its upper edge 2.
    assert float(calibrator_from_state(state).compute_amax(8)) == 2.0
    maximum = {"method": "max", "axis": None, "amax": torch.tensor(2.5), "min": 0.0}
    assert float(calibrator_from_state(maximum).compute_amax(4)) == 2.5
    with pytest.raises(ValueError, match="unknown calibration method 'histogram'"):
        calibrator_from_state({**maximum, "method": "histogram"})


def test_a_percentile_per_bit_width_sets_each_widths_amax() -> None:
    """`percentile: {8: 99.99, 4: 99.9, 2: 99.0}`: a width takes the entry of the largest
    width up to it (3 bits -> the 2-bit entry, 16 -> the 8-bit one), each amax the share's
    quantile of |x| (numpy's, to a bin); the quantizer switches with its width."""
    from model_explorer.quantization import TensorQuantizer

    x = torch.randn(50_001, generator=torch.Generator().manual_seed(3)) * 2  # no exact ranks
    shares = {8: 99.99, 4: 99.9, 2: 99.0}
    quantizer = TensorQuantizer(8, calibrator=make_calibrator("percentile", percentile=shares))
    quantizer.start_calibration()
    quantizer(x)
    quantizer.finish_calibration()
    width = quantizer.calibrator.bin_width
    magnitudes = x.abs().numpy()
    for bits, share in [(8, 99.99), (16, 99.99), (5, 99.9), (4, 99.9), (3, 99.0), (2, 99.0)]:
        quantizer.num_bits = bits
        expected = np.percentile(magnitudes, share, method="inverted_cdf")
        assert 0 <= float(quantizer.amax) - expected <= width * 1.001, bits
    with pytest.raises(UserError, match="calibration: percentile"):
        make_calibrator("percentile", percentile={8: 120.0})


ENTROPY_CASES = [
    ("relu", 8, True),
    ("relu", 3, False),
    ("sparse relu", 4, False),
    ("normal", 4, True),
]


@pytest.mark.parametrize(("kind", "bits", "unsigned"), ENTROPY_CASES)
def test_entropy_thresholds_agree_with_modelopts_calibrator(
    kind: str, bits: int, unsigned: bool
) -> None:
    """modelopt's HistogramCalibrator (TensorRT's KL rule, as NVIDIA implements it) as the
    oracle, on what follows a ReLU (half the values or more exactly 0: the spike its rule sets
    aside) and on a Gaussian. The KL curve is flat near its minimum at 8 bits: 20% apart at
    most there, 5% below."""
    calib = pytest.importorskip(
        "modelopt.torch.quantization.calib", reason="the modelopt extra is not installed"
    )
    normal = torch.randn(100_000, generator=torch.Generator().manual_seed(0))
    data = {"relu": torch.relu(normal) * 2, "sparse relu": torch.relu(normal - 1)}.get(kind, normal)
    theirs = calib.HistogramCalibrator(
        num_bits=bits, axis=None, unsigned=unsigned, num_bins=2048, skip_zeros=False
    )
    theirs.collect(data)
    expected = float(theirs.compute_amax("entropy", stride=2, start_bin=128))
    ours = collected(make_calibrator("entropy"), [data])
    tolerance = 0.2 if bits == 8 else 0.05
    assert float(ours.compute_amax(bits, unsigned)) == pytest.approx(expected, rel=tolerance)
