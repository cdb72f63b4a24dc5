"""Fresh random input values per `TensorSpec.init`, shared by every runner (IREE, adb, CUDA, torch).

Runners differ only in how they store the values (bf16 bit patterns on CUDA, NumPy dtypes for IREE);
what is drawn, and from which generator, is decided here once.
"""

from __future__ import annotations

import numpy as np

from pipeline.contracts import TensorSpec

__all__ = ["random_values"]


def random_values(spec: TensorSpec, rng: np.random.Generator, *, normal_dtype: type = np.float64) -> np.ndarray:
    """Values for input `spec` (never zeros): normal N(0, 1), uniform [-1, 1), randint [low, high), or
    permutation (the first N of a random permutation of range(high), N the element count, C order).
    `normal_dtype` is the precision normal values are drawn in (float32 or float64)."""
    if spec.init == "randint":
        return rng.integers(spec.low, spec.high, size=spec.shape)  # type: ignore[arg-type]
    if spec.init == "permutation":
        count = int(np.prod(spec.shape))
        return rng.permutation(spec.high)[:count].reshape(spec.shape)  # type: ignore[arg-type]
    if spec.init == "uniform":
        return rng.uniform(-1.0, 1.0, size=spec.shape)
    if spec.init == "normal":
        return rng.standard_normal(size=spec.shape, dtype=normal_dtype)
    raise ValueError(f"input {spec.name} has init={spec.init}; an input needs random values")
