"""Bundle manifest: what a builder produced for one suite commit, per case x target."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from pipeline.contracts.ids import CaseIdStr, TargetStr
from pipeline.contracts.limits import NOT_BOOLEAN, Count32, Count64, Int

Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
DType = Literal["f64", "f32", "f16", "bf16", "i64", "i32", "i8"]
ITEM_BYTES: dict[str, int] = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i8": 1}


class TensorSpec(BaseModel):
    """One argument or result of a kernel; inputs are made fresh and random on the device host."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    role: Literal["input", "output"]
    shape: list[Annotated[int, Field(ge=1)]]
    dtype: DType
    init: Literal["normal", "uniform", "randint", "permutation", "none"] = Field(
        default="normal",
        description="how a fresh input is drawn; never zeros. permutation: distinct integers, the first "
                    "N (N = the element count, C order) of a random permutation of range(high); a [N] or "
                    "[N, 1] tensor is then a permutation along axis 0 when N == high (e.g. destination rows)",
    )
    low: Int | None = Field(default=None, description="randint: inclusive lower bound")
    high: Int | None = Field(default=None, description="randint: exclusive upper bound; permutation: range(high)")

    @model_validator(mode="after")
    def _integer_bounds(self) -> TensorSpec:
        if self.init == "randint" and (self.low is None or self.high is None or self.high <= self.low):
            raise ValueError("init=randint needs low < high")
        if self.init == "permutation":
            if self.low is not None or self.high is None or self.high < self.count:
                raise ValueError("init=permutation needs high >= the element count (and no low)")
        return self

    @property
    def count(self) -> int:
        """Elements (C order)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.count * ITEM_BYTES[self.dtype]


class KernelParam(BaseModel):
    """One parameter of a GPU kernel launched through a driver API: a tensor's device pointer, or a
    typed scalar whose value the builder fixed."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="the kernel's parameter name")
    tensor: str | None = Field(default=None, description="pointer parameter: the tensor whose buffer is passed")
    dtype: Literal["i32", "i64", "fp32"] | None = Field(default=None, description="scalar parameter: its type")
    value: int | float | None = Field(default=None, description="scalar parameter: its value")

    @model_validator(mode="after")
    def _pointer_or_scalar(self) -> KernelParam:
        if (self.tensor is None) == (self.dtype is None) or (self.dtype is None) != (self.value is None):
            raise ValueError(f"parameter {self.name}: give either tensor, or dtype and value")
        if self.dtype in ("i32", "i64") and not isinstance(self.value, int):
            raise ValueError(f"parameter {self.name}: an integer parameter needs an integer value")
        return self


class TorchCall(BaseModel):
    """A vendor control: a PyTorch operator the agent calls on the case's tensors (cuBLAS through
    `matmul`, cuDNN through `conv2d`, `sdpa`, the index ops). Nothing is compiled for it: the entry
    has no artifact and no compile statistics, and runs where the agent host has torch with CUDA."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["matmul", "sdpa", "conv2d", "index_select", "index_add"]
    params: dict[str, int | float | bool | str] = Field(
        default_factory=dict, description="the operator's settings, e.g. is_causal, stride, groups")


class LaunchSpec(BaseModel):
    """How to invoke the artifact: entry point, and for GPU code the grid and resources.

    IREE modules take `arguments` and return `results`. A CUDA kernel (`parameters` set) takes its
    parameters in that order, every tensor (inputs and outputs) by device pointer, followed by
    `null_pointers` null pointers (Triton's global and profile scratch), with `threads` threads per
    block along x and `shared_bytes` of dynamic shared memory. A vendor control (`torch` set) is a
    PyTorch call on `arguments` returning `results`; `entry_point` names the operator.
    """

    model_config = ConfigDict(extra="forbid")

    entry_point: str = Field(min_length=1)
    arguments: list[str] = Field(description="tensor names in argument order (the reference takes them so)")
    results: list[str] = Field(default_factory=list, description="tensor names returned, in order")
    grid: list[Annotated[int, Field(ge=1)]] | None = None
    threads: Annotated[int, Field(ge=1), NOT_BOOLEAN] | None = None
    shared_bytes: Annotated[int, Field(ge=0), NOT_BOOLEAN] | None = None
    parameters: list[KernelParam] | None = Field(
        default=None, description="driver-API launches: the kernel's parameters in order")
    null_pointers: Int = Field(default=0, ge=0, description="null pointer parameters after `parameters`")
    torch: TorchCall | None = Field(default=None, description="vendor control: the PyTorch call, no artifact")

    @model_validator(mode="after")
    def _gpu_launch_complete(self) -> LaunchSpec:
        if self.parameters is not None and (self.grid is None or self.threads is None or self.shared_bytes is None):
            raise ValueError("a launch with parameters needs grid, threads and shared_bytes")
        if self.torch is not None and self.parameters is not None:
            raise ValueError("a launch is either a PyTorch call (torch) or a kernel (parameters), not both")
        return self

    def tensor_names(self) -> list[str]:
        """Every tensor this launch touches: arguments, results and pointer parameters."""
        pointers = [p.tensor for p in self.parameters or () if p.tensor is not None]
        return list(dict.fromkeys([*self.arguments, *self.results, *pointers]))


class ReferenceSubset(BaseModel):
    """Compare only `count` random indices along `axis` of every result, where the float64 reference
    of all of them costs too much on the agent's CPU (16k-token attention: ~1e13 operations).

    The agent draws the indices from the case's seeded generator, calls the reference function with
    `index=` (sorted int64 indices) and compares the kernel's results at those indices. Every element
    of every result is still checked to be finite: outputs are NaN-poisoned before the check launch,
    so an element the kernel never wrote fails the check wherever it is.
    """

    model_config = ConfigDict(extra="forbid")

    axis: Int = Field(ge=0, description="the results' axis indices are drawn along (same for every result)")
    count: Int = Field(ge=1, description="how many indices are compared (all when the axis is shorter)")


class ReferenceSpec(BaseModel):
    """The suite function that computes the expected output in higher precision (NumPy)."""

    model_config = ConfigDict(extra="forbid")

    module: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$", description="module inside the suite")
    function: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    atol: float = Field(ge=0, allow_inf_nan=False)
    rtol: float = Field(ge=0, allow_inf_nan=False)
    subset: ReferenceSubset | None = Field(
        default=None, description="compare a random subset of indices only; all elements are still checked written")


class CompileStats(BaseModel):
    """What the compiler reported for one artifact; absent figures stay None, never 0."""

    model_config = ConfigDict(extra="forbid")

    compiler: str = Field(max_length=100)
    compiler_version: str = Field(max_length=100)
    compile_time_s: float = Field(ge=0, allow_inf_nan=False)
    binary_bytes: Count64
    registers: Count32 | None = None
    spills: Count32 | None = None
    shared_bytes: Count32 | None = None
    flags: list[str] = Field(default_factory=list)


InstructionClass = Literal["mma", "global_load", "global_store", "shared_load", "shared_store", "async_copy",
                          "barrier", "branch", "other"]
INSTRUCTION_CLASSES: tuple[str, ...] = get_args(InstructionClass)
"""Tensor-core (matrix) MMA, global and shared (LDS) loads and stores, asynchronous copies (cp.async,
TMA, loads straight into LDS), barriers and fences, branches (calls, returns and exits too), the rest."""


class InstructionMix(BaseModel):
    """How many instructions of each class a kernel's listing has (`pipeline.build.disassembly`)."""

    model_config = ConfigDict(extra="forbid")

    total: Count64
    by_class: dict[InstructionClass, Count64] = Field(description="every class, each instruction in exactly one")

    @model_validator(mode="after")
    def _classes_add_up(self) -> InstructionMix:
        if set(self.by_class) != set(INSTRUCTION_CLASSES):
            raise ValueError(f"by_class names every class once: {', '.join(INSTRUCTION_CLASSES)}")
        if sum(self.by_class.values()) != self.total:
            raise ValueError("the classes' counts add up to the total")
        return self


def inside_bundle(path: str) -> bool:
    """A bundle-relative file path that cannot leave the bundle: not absolute, no '..' component."""
    return not path.startswith("/") and ".." not in path.split("/")


class CodeEvidence(BaseModel):
    """The code of an artifact as its disassembler reads it: the normalized instruction listing
    (addresses, encodings, symbol and kernel names taken out, so a rename changes nothing), its
    sha256 and its instruction mix; or, for a target no disassembler of this builder reads, why not."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(max_length=200, description="what read the code, e.g. `cuobjdump -sass`; empty when unavailable")
    digest: Sha256 | None = Field(default=None, description="sha256 of the normalized listing (the file `listing`)")
    listing: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.\-/]+$",
                                description="the normalized listing, relative to the bundle root")
    instructions: InstructionMix | None = None
    unavailable: str | None = Field(default=None, max_length=500, description="why there is no listing")

    @model_validator(mode="after")
    def _listing_or_reason(self) -> CodeEvidence:
        read = (self.digest, self.listing, self.instructions)
        if self.unavailable is None and any(v is None for v in read):
            raise ValueError("code evidence needs digest, listing and instructions, or the reason it is unavailable")
        if self.unavailable is not None and any(v is not None for v in read):
            raise ValueError("unavailable code evidence has no digest, listing or instructions")
        if self.listing is not None and not inside_bundle(self.listing):
            raise ValueError("listing path must stay inside the bundle")
        return self


class ArtifactRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(pattern=r"^[A-Za-z0-9_.\-/]+$", description="relative to the bundle root")
    sha256: Sha256
    size_bytes: Int = Field(ge=0)

    @model_validator(mode="after")
    def _stays_inside(self) -> ArtifactRef:
        if not inside_bundle(self.path):
            raise ValueError("artifact path must stay inside the bundle")
        return self


class BundleEntry(BaseModel):
    """One case compiled for one target: an artifact and how to run it, or the compile error."""

    model_config = ConfigDict(extra="forbid")

    case: CaseIdStr
    target: TargetStr
    model: str = Field(default="", max_length=200, description="the model the shape comes from")
    status: Literal["built", "failed"]
    error: str | None = None
    artifact: ArtifactRef | None = None
    launch: LaunchSpec | None = None
    tensors: list[TensorSpec] = Field(default_factory=list)
    reference: ReferenceSpec | None = None
    flops: Count64 = Field(description="floating-point operations per call, for the roofline")
    bytes: Count64 = Field(description="minimum bytes moved per call, for the roofline")
    compile: CompileStats | None = None
    code: CodeEvidence | None = Field(default=None, description="the artifact's disassembly; absent where nothing "
                                      "was compiled (a failed entry, a vendor control) or the builder predates it")

    @model_validator(mode="after")
    def _built_or_failed(self) -> BundleEntry:
        if self.status == "built":
            vendor = self.launch is not None and self.launch.torch is not None
            needed = ("launch", "reference") if vendor else ("artifact", "launch", "compile", "reference")
            missing = [f for f in needed if getattr(self, f) is None]
            if missing:
                raise ValueError(f"a built entry needs {', '.join(missing)}")
            if vendor and (self.artifact is not None or self.compile is not None or self.code is not None):
                raise ValueError("a vendor (torch) entry is not compiled: it has no artifact, compile statistics or code")
            if self.error is not None:
                raise ValueError("a built entry has no error")
            names = {t.name for t in self.tensors}
            assert self.launch is not None
            unknown = [n for n in self.launch.tensor_names() if n not in names]
            if unknown:
                raise ValueError(f"launch names unknown tensors: {', '.join(unknown)}")
        else:
            if not self.error:
                raise ValueError("a failed entry needs its error")
            if self.artifact is not None or self.code is not None:
                raise ValueError("a failed entry has no artifact or code")
        return self

    def binary_digest(self) -> str | None:
        """sha256 of what a device would time for this entry: the artifact's sha256, the launch
        description (runner, entry point, grid, parameters, or the vendor operator) and the input
        specification. Two entries with equal digests on one device class run identical code on
        identically made inputs; None for an entry that was not built. The reference and the case's
        model label are left out: they judge or name the run, they do not change what is timed."""
        if self.status != "built" or self.launch is None:
            return None
        identity = {
            "target": self.target,
            "artifact": self.artifact.sha256 if self.artifact is not None else None,
            "launch": self.launch.model_dump(mode="json"),
            "tensors": [t.model_dump(mode="json") for t in self.tensors],
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def code_digest(self) -> str | None:
        """sha256 of what a device would run for this entry, names aside: `binary_digest` with the
        artifact replaced by its listing's digest (`code.digest`) and the kernel's and its
        parameters' names left out. Two entries with equal code digests on one device class run the
        same instructions on identically made inputs with the same launch, whatever their names;
        None where there is no listing (not built, a vendor control, no disassembler)."""
        if self.status != "built" or self.launch is None or self.code is None or self.code.digest is None:
            return None
        launch = self.launch.model_dump(mode="json", exclude={"entry_point"})
        for parameter in launch.get("parameters") or ():
            parameter.pop("name", None)
        identity = {
            "target": self.target, "code": self.code.digest, "launch": launch,
            "tensors": [t.model_dump(mode="json") for t in self.tensors],
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class BundleManifest(BaseModel):
    """The bundle's table of contents; `manifest.json` at the bundle root."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    repository: str = Field(min_length=1, max_length=200)
    commit: Sha
    suite_path: str = Field(description="the suite's folder inside the repository ('.' for its root)")
    suite_digest: str = Field(min_length=1, max_length=100, description="git tree id of the suite folder at the commit")
    suite_source: str = Field(default="suite", description="bundle folder holding the suite's sources")
    created_at: datetime
    compilers: dict[str, str]
    targets: list[TargetStr]
    entries: list[BundleEntry]

    @model_validator(mode="after")
    def _unique_entries(self) -> BundleManifest:
        seen: set[tuple[str, str]] = set()
        for entry in self.entries:
            key = (entry.case, entry.target)
            if key in seen:
                raise ValueError(f"duplicate entry {entry.case} on {entry.target}")
            seen.add(key)
        return self


def bundle_digest(manifest: BundleManifest) -> str:
    """A bundle's identity, the one definition (builder, store, agents, result documents): sha256 of
    its manifest as canonical JSON (sorted keys, no spaces), so that it does not depend on how
    `manifest.json` happens to be laid out on disk. The manifest holds every artifact's sha256."""
    canonical = json.dumps(manifest.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
