"""Correctness outcomes already established on this host, by binary, reference and input policy.

A binary that passed its check on a device class passes it again on the same class with inputs
drawn by the same policy: checking it again on every run only spends the reference's time (the
float64 NumPy reference of a large GEMM takes seconds on a host). The key is the entry's binary
digest (artifact bytes, launch description and input specification: `BundleEntry.binary_digest`),
its reference (module, function, tolerances, subset) and the device class; `CHECK_POLICY` names the
way inputs are drawn and compared, so that changing it empties the cache. Only passes are kept: a
wrong kernel is checked, and reported, every time.

One small JSON file per key, written atomically: concurrent agents on one host never see half a
record, and a corrupt or foreign file reads as a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from pipeline.contracts import BundleEntry, Correctness

__all__ = ["CHECK_POLICY", "CheckCache", "KeptFiles"]

M = TypeVar("M", bound=BaseModel)

CHECK_POLICY = "inputs-v1"
"""Bump when input generation or the comparison changes: outcomes under another policy are not reused."""
CACHED_DETAIL = "passed when this binary was checked on this device class before (check cache)"


class KeptFiles:
    """Documents kept in `folder` (created on first write), one JSON file per key, written atomically;
    a missing, corrupt or foreign file reads as None. What the agent keeps across jobs per binary."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def read(self, key: str, model: type[M]) -> M | None:
        try:
            return model.model_validate_json((self.folder / f"{key}.json").read_bytes())
        except (OSError, ValidationError):
            return None

    def write(self, key: str, document: BaseModel) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{key}.{uuid.uuid4().hex[:8]}.tmp"
        partial.write_text(document.model_dump_json())
        os.replace(partial, self.folder / f"{key}.json")


class CheckCache:
    """Passed checks kept in `folder` (created on first write)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._files = KeptFiles(self.folder)

    @staticmethod
    def key(entry: BundleEntry, device_class: str) -> str | None:
        digest = entry.binary_digest()
        if digest is None or entry.reference is None:
            return None
        identity = [CHECK_POLICY, device_class, digest, entry.reference.model_dump(mode="json")]
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def get(self, entry: BundleEntry, device_class: str) -> Correctness | None:
        """The kept outcome (its detail saying it was cached), or None."""
        key = self.key(entry, device_class)
        if key is None:
            return None
        kept = self._files.read(key, Correctness)
        return kept.model_copy(update={"detail": CACHED_DETAIL}) if kept is not None and kept.passed else None

    def put(self, entry: BundleEntry, device_class: str, correctness: Correctness) -> None:
        key = self.key(entry, device_class)
        if key is None or not correctness.passed or correctness.detail == CACHED_DETAIL:
            return
        self._files.write(key, correctness)
