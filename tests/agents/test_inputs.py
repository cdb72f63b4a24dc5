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
    for name, (host, _) in cuda.items():
        np.testing.assert_array_equal(host, iree[name])
