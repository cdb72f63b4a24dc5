"""What every compiler of the builder hands back, and how it fails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline.contracts import CodeEvidence, CompileStats

__all__ = ["CompiledArtifact", "CompileError", "UnsupportedTarget"]


class CompileError(RuntimeError):
    """A compile failed; the message ends with the tail of the compiler's error output."""


class UnsupportedTarget(CompileError):
    pass


@dataclass(frozen=True)
class CompiledArtifact:
    """The artifact's bytes, the compiler's statistics, and the launch facts only the compile knows
    (LaunchSpec fields beyond the case's tensor names: entry point, grid, threads, shared bytes...),
    and the code's evidence with its normalized listing (`pipeline.build.disassembly`)."""

    data: bytes
    stats: CompileStats
    launch: dict[str, Any] = field(default_factory=dict)
    code: CodeEvidence | None = None
    listing: str = ""
