"""The versioned documents that cross process and machine boundaries, and their validation.

`parse_manifest` / `parse_result` are the only way a document enters the system: they raise
`ContractError`, whose message names the failing field and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from pipeline.contracts import strict_json
from pipeline.contracts.commits import CommitInfo
from pipeline.contracts.ids import SCHEMA_VERSION, CaseId, DeviceClass, Target
from pipeline.contracts.manifest import (
    BundleEntry,
    BundleManifest,
    CodeEvidence,
    CompileStats,
    InstructionMix,
    KernelParam,
    LaunchSpec,
    ReferenceSubset,
    TensorSpec,
    TorchCall,
    bundle_digest,
)
from pipeline.contracts.metrics import METRICS, Metric
from pipeline.contracts.result import (
    CaseResult,
    Correctness,
    DeviceInfo,
    ResultDocument,
    SampleStats,
)

__all__ = [
    "SCHEMA_VERSION", "CommitInfo", "CaseId", "Target", "DeviceClass", "BundleManifest", "BundleEntry", "CompileStats",
    "CodeEvidence", "InstructionMix",
    "bundle_digest",
    "LaunchSpec", "KernelParam", "TensorSpec", "TorchCall", "ReferenceSubset", "ResultDocument", "CaseResult",
    "SampleStats", "Correctness", "DeviceInfo",
    "METRICS", "Metric", "ContractError", "parse_manifest", "parse_result", "SCHEMA_MODELS", "SCHEMA_DIR",
    "schema_of", "write_schemas",
]

SCHEMA_DIR = Path(__file__).parent / "schemas"
SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "case-id": CaseId,
    "target": Target,
    "device-class": DeviceClass,
    "bundle-manifest": BundleManifest,
    "result-document": ResultDocument,
}

M = TypeVar("M", bound=BaseModel)


class ContractError(ValueError):
    """A document that does not validate; `errors` lists (field path, reason)."""

    def __init__(self, document: str, errors: list[tuple[str, str]]):
        self.document = document
        self.errors = errors
        lines = "; ".join(f"{field}: {reason}" for field, reason in errors)
        super().__init__(f"invalid {document}: {lines}")


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(document)"


def _validate(model: type[M], document: str, data: Any) -> M:
    if isinstance(data, (bytes, str)):
        try:
            data = strict_json.loads(data)
        except strict_json.BodyError as exc:
            raise ContractError(document, [(exc.field, str(exc))]) from None
    if isinstance(data, dict):
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION or isinstance(version, bool):   # True == 1 in Python, not in JSON
            raise ContractError(
                document, [("schema_version", f"unknown schema version {version!r}; this server reads {SCHEMA_VERSION}")]
            )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ContractError(
            document, [(_field_path(e["loc"]), e["msg"]) for e in exc.errors(include_url=False)]
        ) from None


def parse_manifest(data: Any) -> BundleManifest:
    return _validate(BundleManifest, "bundle manifest", data)


def parse_result(data: Any) -> ResultDocument:
    return _validate(ResultDocument, "result document", data)


def schema_of(name: str) -> dict[str, Any]:
    model = SCHEMA_MODELS[name]
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://benchfarm.dev/schemas/{name}.v{SCHEMA_VERSION}.json"
    return schema


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Regenerate the committed JSON Schemas from the models."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SCHEMA_MODELS:
        path = directory / f"{name}.schema.json"
        path.write_text(json.dumps(schema_of(name), indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written
