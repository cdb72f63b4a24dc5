"""Random inputs made on the GPU (PyTorch on CUDA) instead of on the host, for the CUDA and torch runners.

Made on the host, a GPU job's inputs were most of its check phase: drawing every element with NumPy,
then copying it over (on a lent H200, 80 s of a 140 s pull-request job went to checks). Here the same
draw runs on the device: a 16-bit code per element from a seeded `torch.Generator` on the GPU, looked up
in the table of the distribution's 65,536 equal-probability quantiles (`inputs.CODES`; bf16 inputs are
drawn this way on the host too, so their values have the same distribution both ways; float32 and
float16 inputs are the same 65,536 midpoints, where the host draws them continuously). Never zero.

Only the inputs whose values are fresh per run and drawn from a distribution (`normal`, `uniform`) of a
floating dtype are made here; index inputs (`inputs.PATTERN_INITS`) stay on the host, drawn from their
spec alone so that every run reads the same rows. Host copies, which only a correctness check's
reference needs, are downloaded from the device when a check runs (`HostInputs`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from pipeline.agents.runners.inputs import CODES, bf16_bits, quantile_midpoints
from pipeline.contracts import TensorSpec

__all__ = ["DeviceInputs", "HostInputs", "device_inputs"]

CHUNK_ELEMENTS = 1 << 26
"""Elements drawn at once: the codes' temporary (4 bytes each) stays at 256 MiB for the largest table."""
_DTYPES = ("bf16", "f16", "f32")


class DeviceInputs:
    """Makes inputs on one GPU with torch; `can_make` says which."""

    def __init__(self, gpu_ordinal: int, seed: int):
        import torch

        self._torch = torch
        self._gpu = torch.device("cuda", gpu_ordinal)
        self._generator = torch.Generator(device=self._gpu)
        self._generator.manual_seed(seed)

    @staticmethod
    def can_make(spec: TensorSpec) -> bool:
        return spec.role == "input" and spec.init in ("normal", "uniform") and spec.dtype in _DTYPES

    def make(self, spec: TensorSpec) -> Any:
        """A contiguous torch tensor of `spec`'s shape and dtype on the GPU (bf16 as int16 bit patterns)."""
        torch = self._torch
        table = _table(spec.init, spec.dtype, self._gpu)
        flat = torch.empty(spec.count, dtype=table.dtype, device=self._gpu)
        with torch.cuda.device(self._gpu):
            for start in range(0, spec.count, CHUNK_ELEMENTS):
                stop = min(start + CHUNK_ELEMENTS, spec.count)
                codes = torch.randint(0, CODES, (stop - start,), generator=self._generator, device=self._gpu,
                                      dtype=torch.int32)
                torch.index_select(table, 0, codes, out=flat[start:stop])
        return flat.view(spec.shape)

    def synchronize(self) -> None:
        """Wait for what `make` queued (on torch's current stream of the GPU)."""
        self._torch.cuda.synchronize(self._gpu)


@cache
def _table(init: str, dtype: str, gpu: Any) -> Any:
    """The quantile midpoints of `init` as `dtype` on `gpu` (bf16: the host table's bit patterns, as int16)."""
    import torch

    values = quantile_midpoints(init)
    if dtype == "bf16":
        host = torch.from_numpy(bf16_bits(values.astype(np.float32)).view(np.int16).copy())
    else:
        host = torch.from_numpy(values.astype(np.float32 if dtype == "f32" else np.float16))
    return host.to(gpu)


def device_inputs(gpu_ordinal: int, rng: np.random.Generator) -> DeviceInputs | None:
    """A maker of inputs on GPU `gpu_ordinal` seeded from `rng` (one draw), or None where torch with CUDA
    is not importable (the inputs are then made on the host)."""
    seed = int(rng.integers(0, 2**63 - 1))
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return DeviceInputs(gpu_ordinal, seed)


class HostInputs:
    """The host arrays of a workspace's inputs for the reference: those made on the host as they are, the
    others downloaded once from the device (`download(name)` returns the array as the device stores it:
    bf16 as uint16 bit patterns) the first time a check asks."""

    def __init__(self, on_host: dict[str, np.ndarray], download: Callable[[str], np.ndarray]):
        self._arrays = dict(on_host)
        self._download = download

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            self._arrays[name] = self._download(name)
        return self._arrays[name]

    def fetch(self, names: list[str]) -> None:
        """Download `names` now (before a launch that could, by a bug, write into its inputs)."""
        for name in names:
            self[name]
