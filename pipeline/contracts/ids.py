"""Stable identities: case id, target, device class (DESIGN.md, "Identities")."""

from __future__ import annotations

import fnmatch
import re
import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

SCHEMA_VERSION = 1


def _part(longest: int) -> str:
    """A case id part of at most `longest` characters (the store's column for it holds no more)."""
    return rf"[A-Za-z0-9][A-Za-z0-9._+\-x]{{0,{longest - 1}}}"


# family, name, shape, dtype, impl: the longest each may be (pipeline.store.models.Case's columns)
_PARTS = {"family": 100, "name": 200, "shape": 200, "dtype": 32, "impl": 64}
CASE_ID_PATTERN = "^" + "/".join(_part(n) for n in _PARTS.values()) + "$"
TARGET_PATTERN = r"^[a-z][a-z0-9\-]*:[A-Za-z0-9_\-]+$"
DEVICE_CLASS_PATTERN = r"^[a-z0-9][a-z0-9_\-]*$"

CaseIdStr = Annotated[str, StringConstraints(pattern=CASE_ID_PATTERN, max_length=400)]
TargetStr = Annotated[str, StringConstraints(pattern=TARGET_PATTERN, max_length=100)]
DeviceClassName = Annotated[str, StringConstraints(pattern=DEVICE_CLASS_PATTERN, max_length=100)]


class CaseId(BaseModel):
    """`family/name/shape/dtype/impl`, e.g. `gemm/llama3-8b-mlp-up/4096x14336x4096/bf16/triton`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    family: str = Field(pattern=rf"^{_part(_PARTS['family'])}$")
    name: str = Field(pattern=rf"^{_part(_PARTS['name'])}$")
    shape: str = Field(pattern=rf"^{_part(_PARTS['shape'])}$")
    dtype: str = Field(pattern=rf"^{_part(_PARTS['dtype'])}$")
    impl: str = Field(pattern=rf"^{_part(_PARTS['impl'])}$")

    @classmethod
    def parse(cls, text: str) -> CaseId:
        parts = text.split("/")
        if len(parts) != 5:
            raise ValueError(f"case id {text!r} must have 5 parts family/name/shape/dtype/impl")
        family, name, shape, dtype, impl = parts
        return cls(family=family, name=name, shape=shape, dtype=dtype, impl=impl)

    def __str__(self) -> str:
        return f"{self.family}/{self.name}/{self.shape}/{self.dtype}/{self.impl}"


class Target(BaseModel):
    """What a compiler emits code for: `backend:arch`, e.g. `cuda:sm_90`, `llvm-cpu:x86_64`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    backend: Literal["cuda", "hip", "llvm-cpu", "vulkan"]
    arch: str = Field(pattern=r"^[A-Za-z0-9_\-]+$")

    @classmethod
    def parse(cls, text: str) -> Target:
        if not re.match(TARGET_PATTERN, text):
            raise ValueError(f"target {text!r} must look like backend:arch, e.g. llvm-cpu:x86_64")
        backend, arch = text.split(":", 1)
        return cls(backend=backend, arch=arch)  # type: ignore[arg-type]

    def __str__(self) -> str:
        return f"{self.backend}:{self.arch}"


class DeviceClass(BaseModel):
    """What a job is scheduled on; names the target(s) its devices run and how to run them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    name: DeviceClassName
    kind: Literal["cpu", "gpu", "phone"]
    targets: list[TargetStr] = Field(min_length=1)
    runtime: Literal["iree", "cuda"] = Field(
        description="how artifacts are executed: IREE runtime (HAL driver below) or the CUDA driver API"
    )
    hal_driver: str | None = Field(default=None, max_length=64, description="IREE HAL driver, e.g. local-sync, cuda")
    description: str = ""

    @model_validator(mode="after")
    def _iree_needs_driver(self) -> DeviceClass:
        if self.runtime == "iree" and not self.hal_driver:
            raise ValueError("an IREE device class needs hal_driver")
        return self


def selects_case(glob: str | None, case_id: str) -> bool:
    """Whether a job's `cases` glob (fnmatch, case-sensitive; several separated by commas, which no
    case id holds; None: all) selects a case id."""
    return glob is None or any(fnmatch.fnmatchcase(case_id, g) for g in glob.split(","))


BUILDKITE_NAMESPACE = uuid.UUID("6b1f0c59-3f0e-4d7e-9a57-62656e636866")


def buildkite_job_ids(build_id: str, device_class: str) -> tuple[str, str]:
    """(run id, job id) of a Buildkite build's device step: `benchfarm run-job` names its run and job
    so (a retried step continues the same job), and the service that created the build can say
    beforehand which run and jobs it will make."""
    return (str(uuid.uuid5(BUILDKITE_NAMESPACE, f"buildkite/{build_id}")),
            str(uuid.uuid5(BUILDKITE_NAMESPACE, f"buildkite/{build_id}/{device_class}")))
