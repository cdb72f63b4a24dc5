"""Fresh random input values per `TensorSpec.init`, shared by every runner (IREE, adb, CUDA, torch).

Runners differ only in how they store the values (bf16 bit patterns on CUDA, NumPy dtypes for IREE);
what is drawn, and from which generator, is decided here once.

bf16 inputs (`random_bf16`) are drawn as 16-bit codes looked up in a table of the distribution's
65,536 quantiles, already rounded to bf16: one cheap draw and one gather per element. Drawing
float32 normals and rounding them cost ~40 ns per element on the agents' hosts, most of an unpaired
GPU job's check phase (a 128256 x 4096 embedding table alone took 20 s). The values are those of
the continuous draw rounded to bf16, with the normal's tails cut at +-4.3 (probability 2e-5).

Index inputs (`PATTERN_INITS`: randint, permutation) say which rows a kernel reads and writes: its
memory access pattern, so its timing. They are drawn from their spec alone (`pattern_seed`), the
same in every run, on every commit and for a case's vendor control, so that two runs of a gather or
a MoE dispatch time the same work; the values they move stay fresh per run. Drawn per run, the
pattern is a level of variation of its own, and the likeliest one behind what an H100 showed
(2026-11-25, before this): in unpaired A/A, Triton MoE dispatch/combine cases of 64 tokens moved by
1-2 % between runs, outside their 95 % intervals (half-widths 0.4-0.7 %), on several buffer copies;
never in paired A/A, where the base reads its head's buffers, so the same indices.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from statistics import NormalDist

import numpy as np

from pipeline.contracts import TensorSpec

__all__ = ["CODES", "PATTERN_INITS", "bf16_bits", "bf16_values", "pattern_seed", "quantile_midpoints", "random_bf16",
           "random_values"]

CODES = 1 << 16
"""Equal-probability bins of a bf16 draw (`random_bf16`)."""
PATTERN_INITS = ("randint", "permutation")
"""Inits whose values are indices: drawn from the spec, not the run's generator (module doc)."""


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (uint16), rounding to nearest even (finite inputs)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32 holding exactly those values (NaN patterns stay NaN)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def random_values(spec: TensorSpec, rng: np.random.Generator, *, normal_dtype: type = np.float64) -> np.ndarray:
    """Values for input `spec` (never zeros): normal N(0, 1), uniform [-1, 1), randint [low, high), or
    permutation (the first N of a random permutation of range(high), N the element count, C order).
    `normal_dtype` is the precision normal values are drawn in (float32 or float64). Index inits
    (`PATTERN_INITS`) ignore `rng`: they are the same for the same spec (module doc)."""
    if spec.init in PATTERN_INITS:
        pattern = np.random.default_rng(pattern_seed(spec))
        # TensorSpec's validator holds low and high for randint, high for permutation
        if spec.init == "randint":
            return pattern.integers(spec.low, spec.high, size=spec.shape)  # type: ignore[arg-type]
        count = int(np.prod(spec.shape))
        return pattern.permutation(spec.high)[:count].reshape(spec.shape)  # type: ignore[arg-type]
    if spec.init == "uniform":
        return rng.uniform(-1.0, 1.0, size=spec.shape)
    if spec.init == "normal":
        return rng.standard_normal(size=spec.shape, dtype=normal_dtype)
    raise ValueError(f"input {spec.name} has init={spec.init}; an input needs random values")


def pattern_seed(spec: TensorSpec) -> int:
    """The seed of an index input's values: its name, shape, dtype, init and range, nothing of the run."""
    text = json.dumps([spec.name, list(spec.shape), spec.dtype, spec.init, spec.low, spec.high])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


@cache
def quantile_midpoints(init: str) -> np.ndarray:
    """The midpoints of `CODES` equal-probability bins of `init`'s distribution (normal N(0, 1) or
    uniform [-1, 1)), float64, ascending; none is zero (no midpoint is the median)."""
    p = (np.arange(CODES, dtype=np.float64) + 0.5) / CODES
    if init == "normal":   # NormalDist, not SciPy: agents run on hosts without SciPy (once per process, ~0.2 s)
        values = np.array([NormalDist().inv_cdf(q) for q in p.tolist()])
    elif init == "uniform":
        values = 2.0 * p - 1.0
    else:
        raise ValueError(f"no quantile table for init={init}")
    values.setflags(write=False)
    return values


@cache
def _bf16_quantiles(init: str) -> np.ndarray:
    """bf16 bit patterns of `quantile_midpoints(init)`."""
    table = bf16_bits(quantile_midpoints(init).astype(np.float32))
    table.setflags(write=False)
    return table


def random_bf16(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """bf16 bit patterns (uint16, `spec.shape`) for input `spec`: normal and uniform through the
    quantile table (module doc), the other inits as `random_values` rounded to bf16."""
    if spec.init not in ("normal", "uniform"):
        return bf16_bits(random_values(spec, rng).astype(np.float32))
    codes = rng.integers(0, CODES, size=spec.shape, dtype=np.uint16)
    return _bf16_quantiles(spec.init)[codes]
