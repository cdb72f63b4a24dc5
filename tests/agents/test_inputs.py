"""Input making shared by the runners: every TensorSpec init kind, the permutation one included."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from pipeline.agents.runners import cuda_runner, iree_runner
from pipeline.agents.runners.inputs import random_values
from pipeline.contracts import TensorSpec


def spec(**kw: object) -> TensorSpec:
    return TensorSpec(name="x", role="input", dtype="i32", **kw)  # type: ignore[arg-type]


def test_permutation_is_distinct_and_in_range() -> None:
    full = random_values(spec(shape=[64], init="permutation", high=64), np.random.default_rng(1))
    assert sorted(full.tolist()) == list(range(64))
    column = random_values(spec(shape=[32, 1], init="permutation", high=64), np.random.default_rng(1))
    assert column.shape == (32, 1) and len(set(column.ravel().tolist())) == 32 and column.max() < 64


def test_permutation_needs_enough_values_and_no_low() -> None:
    with pytest.raises(ValidationError):
        spec(shape=[65], init="permutation", high=64)
    with pytest.raises(ValidationError):
        spec(shape=[8], init="permutation", low=0, high=64)
    with pytest.raises(ValidationError):
        spec(shape=[8], init="permutation")


def test_runners_draw_the_same_indices() -> None:
    specs = [spec(shape=[16], init="permutation", high=16), spec(shape=[16], init="randint", low=0, high=5)]
    cuda = cuda_runner.make_inputs(specs, np.random.default_rng(7))
    iree = iree_runner.make_inputs(specs, np.random.default_rng(7))
    for name, host in cuda.items():
        np.testing.assert_array_equal(host, iree[name])


def test_bf16_draws_follow_their_distribution_and_are_never_zero() -> None:
    from scipy import stats

    from pipeline.agents.runners.inputs import bf16_bits, bf16_values, random_bf16

    normal = random_bf16(TensorSpec(name="x", role="input", dtype="bf16", shape=[512, 1024]),
                         np.random.default_rng(3))
    assert normal.dtype == np.uint16 and normal.shape == (512, 1024)
    values = bf16_values(normal).astype(np.float64).ravel()
    assert np.all(values != 0) and np.all(np.isfinite(values))
    np.testing.assert_array_equal(bf16_bits(bf16_values(normal)), normal)   # exact bf16 values
    # N(0, 1) rounded to bf16 (8 significant bits): a KS distance of at most ~2^-9 plus sampling noise
    assert stats.kstest(values, "norm").statistic < 0.004
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1.0) < 0.01
    assert values.max() > 3.5 and values.min() < -3.5
    uniform = bf16_values(random_bf16(TensorSpec(name="u", role="input", dtype="bf16", shape=[1 << 19],
                                                 init="uniform"), np.random.default_rng(4))).astype(np.float64)
    assert np.all(uniform != 0) and uniform.min() >= -1.0 and uniform.max() <= 1.0
    assert stats.kstest(uniform, "uniform", args=(-1.0, 2.0)).statistic < 0.004


def test_bf16_draws_depend_on_the_seed_only() -> None:
    from pipeline.agents.runners.inputs import bf16_bits, random_bf16

    x = TensorSpec(name="x", role="input", dtype="bf16", shape=[64, 64])
    a, b = (random_bf16(x, np.random.default_rng(11)) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    assert np.mean(a != random_bf16(x, np.random.default_rng(12))) > 0.9
    host = cuda_runner.make_inputs([x], np.random.default_rng(11))["x"]
    np.testing.assert_array_equal(host, a)
    reference = cuda_runner.reference_view(x, host)
    assert reference.dtype == np.float32 and np.all(reference != 0)
    np.testing.assert_array_equal(bf16_bits(reference), host)   # the same values, exactly


def test_index_inputs_are_the_same_in_every_run_and_values_fresh() -> None:
    """Index inputs are the kernel's access pattern: two runs (two generators) time the same work,
    while the values they move differ; another index spec gets another pattern."""
    specs = [TensorSpec(name="pos", role="input", shape=[64], dtype="i32", init="permutation", high=256),
             TensorSpec(name="idx", role="input", shape=[32], dtype="i32", init="randint", low=0, high=1000),
             TensorSpec(name="table", role="input", shape=[16, 8], dtype="f32", init="normal")]
    first = cuda_runner.make_inputs(specs, np.random.default_rng(1))
    second = cuda_runner.make_inputs(specs, np.random.default_rng(2))
    for name in ("pos", "idx"):
        np.testing.assert_array_equal(first[name], second[name])
    assert not np.array_equal(first["table"], second["table"])
    one = random_values(spec(shape=[64], init="permutation", high=256), np.random.default_rng(1))
    other = random_values(spec(shape=[64], init="permutation", high=512), np.random.default_rng(1))
    assert not np.array_equal(one, other) and len(set(one.tolist())) == 64


def test_host_inputs_download_once_and_only_what_a_check_asks_for() -> None:
    """The host arrays a check's reference reads: those made on the host as they are; the others
    downloaded from the device once, the first time they are asked for (`device_inputs.HostInputs`)."""
    from pipeline.agents.runners.device_inputs import HostInputs

    device = {"a": np.arange(4, dtype=np.float32), "b": np.ones(3, dtype=np.uint16)}
    downloads: list[str] = []

    def download(name: str) -> np.ndarray:
        downloads.append(name)
        return device[name].copy()

    inputs = HostInputs({"idx": np.array([2, 0, 1])}, download)
    assert inputs["idx"].tolist() == [2, 0, 1] and downloads == []
    inputs.fetch(["a"])
    assert inputs["a"].tolist() == [0, 1, 2, 3] and inputs["a"] is inputs["a"] and downloads == ["a"]
    assert inputs["b"].tolist() == [1, 1, 1] and downloads == ["a", "b"]


def test_quantile_tables_exist_for_drawn_inits_only() -> None:
    from pipeline.agents.runners.inputs import CODES, quantile_midpoints

    normal = quantile_midpoints("normal")
    assert len(normal) == CODES and np.all(np.diff(normal) > 0) and not np.any(normal == 0)
    assert abs(normal.mean()) < 1e-9 and abs(normal.std() - 1) < 0.01
    uniform = quantile_midpoints("uniform")
    assert uniform.min() > -1 and uniform.max() < 1 and not np.any(uniform == 0)
    with pytest.raises(ValueError, match="randint"):
        quantile_midpoints("randint")
