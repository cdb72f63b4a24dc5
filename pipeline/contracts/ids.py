"""Stable identities: case id, target, device class (docs/design.md, "Identities")."""

from __future__ import annotations

import fnmatch
import functools
import operator
import re
import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    StringConstraints,
    ValidationError,
    model_validator,
)
from pydantic_core import core_schema

SCHEMA_VERSION = 1


def _part(longest: int) -> str:
    """A case id part of at most `longest` characters (the store's column for it holds no more)."""
    return rf"[A-Za-z0-9][A-Za-z0-9._+\-x]{{0,{longest - 1}}}"


# family, name, shape, dtype, impl: the longest each may be (pipeline.results.store.models.Case's columns)
_PARTS = {"family": 100, "name": 200, "shape": 200, "dtype": 32, "impl": 64}
CASE_ID_MAX_LENGTH = 400
"""The longest a case id's text may be (`cases.case_id`), though its parts could add up to more."""
CASE_ID_PATTERN = "^" + "/".join(_part(n) for n in _PARTS.values()) + "$"
TARGET_PATTERN = r"^[a-z][a-z0-9\-]*:[A-Za-z0-9_\-]+$"
DEVICE_CLASS_PATTERN = r"^[a-z0-9][a-z0-9_\-]*$"

CaseIdStr = Annotated[str, StringConstraints(pattern=CASE_ID_PATTERN, max_length=CASE_ID_MAX_LENGTH)]
TargetStr = Annotated[str, StringConstraints(pattern=TARGET_PATTERN, max_length=100)]
DeviceClassName = Annotated[str, StringConstraints(pattern=DEVICE_CLASS_PATTERN, max_length=100)]


# The text is how a case id is stored and sent (database, documents, URLs); in between, code holds a
# CaseId and takes its parts from it. `parse` is the one reader of the text, `str()` its one writer.
# (The docstring is the published schema's description: case-id.schema.json.)
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
    def parse(cls, text: str, *, lenient: bool = False) -> CaseId:
        """The one parser of the text form (`str()` is the one formatter); raises ValueError naming
        what is wrong. Cached: a farm parses the same few thousand ids over and over, and a parse
        that validates costs microseconds, a cached one a fifth of one.

        `lenient`: for text validated when it was written (read back from the store): parts that
        do not validate are kept as they are, so a row written around the contract still reads
        (pages escape what they show); only the number of parts is checked.
        """
        return _parse_lenient(text) if lenient else _parse(text)

    def __str__(self) -> str:
        return self._text

    @functools.cached_property
    def _text(self) -> str:
        # Once per instance (parses are cached): pages sort and print thousands of ids by their text.
        # In __dict__ beside the fields, which pydantic's equality, hash and dumps leave out.
        return f"{self.family}/{self.name}/{self.shape}/{self.dtype}/{self.impl}"

    @property
    def without_family(self) -> str:
        """`name/shape/dtype/impl`: the id where its family is shown apart (the dashboard's groups)."""
        return str(self)[len(self.family) + 1:]

    def __copy__(self) -> CaseId:
        copied = super().__copy__()
        copied.__dict__.pop("_text", None)   # model_copy(update=...) changes parts after copying
        return copied

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> CaseId:
        # Every field is an immutable str: a copy is a deep one, at a third of pydantic's cost
        # (dataclasses.asdict deep-copies the case id of each row it converts). A new object all the
        # same: model_copy(deep=True, update=...) writes into what this returns.
        return self.__copy__()


_PART_CHARS = re.compile(r"[A-Za-z0-9._+\-x]*")
_PARSE_CACHE = 16384
"""Ids kept parsed: eight times a 2,000-case suite (a case has one id whatever its device classes)."""


@functools.lru_cache(maxsize=_PARSE_CACHE)
def _parse(text: str) -> CaseId:
    # The model's validation of the parts is the cost the cache saves (pydantic's model_construct
    # is no faster); its error is rewritten to say which part is wrong and why.
    parts = text.split("/")
    if len(parts) == len(_PARTS) and len(text) <= CASE_ID_MAX_LENGTH:
        family, name, shape, dtype, impl = parts
        try:
            return CaseId(family=family, name=name, shape=shape, dtype=dtype, impl=impl)
        except ValidationError:
            pass
    raise ValueError(_problem(text))


@functools.lru_cache(maxsize=_PARSE_CACHE)
def _parse_lenient(text: str) -> CaseId:
    # a cache of its own: the store reads thousands of ids a page, each one lookup when warm
    try:
        return _parse(text)   # a valid id: the same instance as a strict parse
    except ValueError:
        parts = text.split("/")
        if len(parts) != len(_PARTS):
            raise
    family, name, shape, dtype, impl = parts   # _PARTS' order
    return CaseId.model_construct(family=family, name=name, shape=shape, dtype=dtype, impl=impl)


def _problem(text: str) -> str:
    """What is wrong with a case id's text, for the error of `CaseId.parse`."""
    shown = repr(text) if len(text) <= 120 else repr(text[:120]) + "..."
    parts = text.split("/")
    if len(parts) != len(_PARTS):
        return (f"case id {shown} must have 5 parts family/name/shape/dtype/impl separated by '/', "
                f"not {len(parts)}")
    for (field, longest), part in zip(_PARTS.items(), parts, strict=True):
        if not part:
            return f"case id {shown}: its {field} is empty"
        if len(part) > longest:
            return f"case id {shown}: its {field} is {len(part)} characters long, more than {longest}"
        if not (part[0].isascii() and part[0].isalnum()):
            return f"case id {shown}: its {field} {part!r} must begin with a letter or a digit"
        if not _PART_CHARS.fullmatch(part):
            bad = "".join(sorted({c for c in part if not _PART_CHARS.fullmatch(c)}))
            return (f"case id {shown}: its {field} {part!r} holds {bad!r}; "
                    f"only letters, digits and . _ + - are allowed")
    return f"case id {shown} is {len(text)} characters long, more than {CASE_ID_MAX_LENGTH}"


def _case_id_or_text(value: object) -> CaseId:
    if isinstance(value, CaseId):
        return value
    if isinstance(value, str):
        return CaseId.parse(value)
    raise ValueError(f"a case id is a CaseId or its text, not {type(value).__name__}")


_TEXT = operator.attrgetter("_text")
"""str(case_id) without a Python frame: answers serialise thousands of ids."""


class _AsText:
    """Pydantic's schema of `CaseIdAsText`: a CaseId or its text in, the text out, a string's JSON Schema."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _case_id_or_text, json_schema_input_schema=core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(
                _TEXT, return_schema=core_schema.str_schema()))


if TYPE_CHECKING:
    CaseIdAsText = CaseId
else:
    # Not Annotated[CaseId, ...]: FastAPI lists every BaseModel a field is annotated with among
    # OpenAPI's components, and these documents never hold a CaseId object.
    CaseIdAsText = Annotated[object, _AsText]
"""A `CaseId` in a pydantic model whose documents carry its text (the API's answers): validated from a
CaseId or its text, serialised as the text, described as a string (the JSON Schema of a `str` field)."""


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
        return cls(backend=backend, arch=arch)

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
