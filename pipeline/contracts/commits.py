"""A commit as the store records it (from git on the builder, or from a webhook later)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from pipeline.contracts.limits import Count32
from pipeline.contracts.manifest import Sha


class CommitInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sha: Sha
    parents: list[Sha] = Field(default_factory=list, description="first parent first")
    message: str = ""
    author: str = Field("", max_length=300)
    committed_at: datetime
    branch: str | None = Field(None, max_length=300)
    pull_request: Count32 | None = None
