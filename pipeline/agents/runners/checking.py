"""The correctness check every runner shares: the reference on the kernel's inputs, compared with its
results, over a random subset of indices where the case asks for one (`ReferenceSpec.subset`).

With a subset, every element of every result is still checked to be finite: runners poison outputs
with NaN before the check launch, so an element the kernel never wrote fails wherever it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pipeline.agents.runners.iree_runner import MAX_DETAIL_MISMATCHES, check_outputs
from pipeline.contracts import Correctness
from pipeline.contracts.manifest import ReferenceSpec

__all__ = ["check_against_reference", "subset_index"]


def subset_index(size: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` distinct indices below `size` (all of them when the axis is shorter), sorted, int64."""
    return np.sort(rng.choice(size, size=min(count, size), replace=False)).astype(np.int64)


def _unwritten(name: str, out: np.ndarray) -> str | None:
    bad = ~np.isfinite(np.asarray(out, dtype=np.float64))
    if not bad.any():
        return None
    where = "; ".join(str(tuple(int(i) for i in ix)) for ix in np.argwhere(bad)[:MAX_DETAIL_MISMATCHES])
    return f"{name}: {int(bad.sum())}/{bad.size} elements not written or not finite (at {where})"


def check_against_reference(
    outputs: Sequence[np.ndarray], arguments: Sequence[np.ndarray], reference_fn: Callable[..., Any],
    names: Sequence[str], reference: ReferenceSpec, rng: np.random.Generator,
    memo: dict[str, Any] | None = None,
) -> Correctness:
    """Compare the kernel's `outputs` (in `names` order) with `reference_fn(*arguments)`.

    `memo`: shared by the kernels checked on the same `arguments` (a paired base on its head's
    inputs): the reference (and its subset of indices) is computed by the first and reused by the
    others; on a host the float64 reference of a large GEMM costs seconds."""
    subset = reference.subset
    memo = {} if memo is None else memo
    if "expected" not in memo:
        if subset is None:
            memo["index"], raw = None, reference_fn(*arguments)
        else:
            index = subset_index(np.asarray(outputs[0]).shape[subset.axis], subset.count, rng)
            memo["index"], raw = index, reference_fn(*arguments, index=index)
        memo["expected"] = [np.asarray(r) for r in (raw if isinstance(raw, (tuple, list)) else (raw,))]
    expected, index = memo["expected"], memo["index"]
    got: Sequence[np.ndarray] = outputs if subset is None else [np.take(out, index, axis=subset.axis) for out in outputs]
    correctness = check_outputs(got, expected, names, reference)
    if subset is None:
        return correctness
    problems = [p for p in (_unwritten(n, o) for n, o in zip(names, outputs)) if p]
    if not problems:
        return correctness
    return correctness.model_copy(update={
        "passed": False, "max_abs_error": float("inf"), "max_rel_error": float("inf"),
        "detail": "; ".join([*problems, *([correctness.detail] if correctness.detail else [])]),
    })
