"""Code-path evidence in comparisons (issue 32): what changed in the code of a case between two commits.

The builder disassembles every artifact (`pipeline.build.disassembly`); `ingest.ingest_manifest`
keeps each entry's evidence in `compile_stats` (the tool, the listing's digest or why there is none,
the instruction mix) and each listing once in `code_listings` (with its opcode counts), so the
service shows the code without the bundle. Per (case, target), of the newest bundle of each commit
(as the compile statistics: `compile_stats.newest_per_commit`):

- `code_changes`: head against base, one `CodeChangeOut` each: "same code" (equal listing digests,
  other binaries: a rename), "changed" with a one-line summary (`+12 instr: +4 HGMMA, -8 LDG;
  regs 208 → 224; spills 0`: the instruction count, the opcodes that moved most, registers,
  spills and shared bytes), "not disassembled" (a target without a disassembler: the manifest's
  reason), or "no base code" (the base did not build it, or has no listing);
- `unified_diff` and `side_by_side`: the two normalized listings' differences, for the PR comment
  (folded, truncated) and the compare page.

The opcode of a listing's line (`opcode_of`) is its first word after any predicate (`@P0`) or SPIR-V
result (`%12 =`), up to the first dot: `HGMMA.64x128x16.F32.BF16` counts as `HGMMA`, `b.ne` as `b`,
`%12 = OpLoad %3 %9` as `OpLoad`; `function:` lines and labels are not instructions.
"""

from __future__ import annotations

import difflib
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from pipeline.results.store.compile_stats import newest_per_commit
from pipeline.results.store.models import CodeListing

__all__ = ["CODE_STATES", "CodeChangeOut", "DiffRow", "code_changes", "listing_row", "listings", "opcode_counts",
           "opcode_of", "side_by_side", "unified_diff"]

CODE_STATES = ("changed", "same code", "not disassembled", "no base code")
TOP_OPCODES = 3
"""Opcodes named in a summary: those whose count moved most."""


class CodeChangeOut(BaseModel):
    """The code of a case on a target at the head against the base's: what a reviewer reads beside the timing."""

    model_config = ConfigDict(frozen=True)

    state: Literal["changed", "same code", "not disassembled", "no base code"] = Field(
        description="changed | same code (equal listings, other binaries: a rename) | not disassembled (no "
                    "disassembler for the target; `unavailable` says why) | no base code (the base did not build "
                    "the case or has no listing of it)")
    summary: str = Field(description='one line, e.g. "+12 instr: +4 HGMMA, -8 LDG; regs 208 → 224; spills 0"')
    head_digest: str | None = Field(description="sha256 of the head's normalized listing")
    base_digest: str | None = Field(description="sha256 of the base's normalized listing")
    head_instructions: int | None
    base_instructions: int | None
    classes: dict[str, int] = Field(description="instruction class -> head count - base count, the classes that moved")
    opcodes: dict[str, int] = Field(description="opcode -> head count - base count, those that moved (empty where a "
                                                "listing is not stored)")
    registers: tuple[int | None, int | None] = Field(description="base, head")
    spills: tuple[int | None, int | None] = Field(description="base, head")
    shared_bytes: tuple[int | None, int | None] = Field(description="base, head")
    unavailable: str | None = Field(description="why the head's code was not read (the manifest's reason)")
    diff: bool = Field(description="both listings are stored: the comment and the compare page can diff them")


# ---- listings -----------------------------------------------------------------------------------


def opcode_of(line: str) -> str | None:
    """The opcode of one line of a normalized listing (module doc); None for a function line or a label."""
    words = line.split()
    if words and words[0].startswith("@"):   # a predicate guards the instruction
        words = words[1:]
    elif words[1:2] == ["="]:                 # SPIR-V: the result's id first
        words = words[2:]
    if not words or line.endswith(":"):
        return None
    return words[0].split(".", 1)[0] or None


def opcode_counts(listing: str) -> dict[str, int]:
    return dict(Counter(op for line in listing.splitlines() if (op := opcode_of(line)) is not None))


def listing_row(digest: str, text: str) -> dict[str, Any]:
    """A `code_listings` row for a listing whose sha256 is `digest` (checked by the caller)."""
    return {"digest": digest, "opcodes": opcode_counts(text), "listing": zlib.compress(text.encode(), 6)}


def listings(session: Session, digests: Iterable[str]) -> dict[str, str]:
    """digest -> the stored listing's text, for those stored."""
    wanted = sorted(set(digests))
    if not wanted:
        return {}
    return {d: zlib.decompress(blob).decode() for d, blob in session.execute(
        sa.select(CodeListing.digest, CodeListing.listing).where(CodeListing.digest.in_(wanted)))}


# ---- comparisons ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Code:
    digest: str | None
    tool: str | None
    unavailable: str | None
    instructions: dict[str, Any] | None
    registers: int | None
    spills: int | None
    shared_bytes: int | None


def _evidence(session: Session, repository: str, commit_ids: Sequence[int]) -> dict[tuple[int, int, str], _Code]:
    """(commit id, case pk, target) -> the code evidence of the newest bundle of that commit that built it."""
    out = {}
    for row in newest_per_commit(session, repository, commit_ids=commit_ids):   # compile_stats' columns, flat
        if row.status != "built":
            continue
        out[(row.commit_pk, row.case_id, row.target)] = _Code(
            row.code_digest, row.code_tool, row.code_unavailable, row.instructions, row.registers, row.spills,
            row.shared_bytes)
    return out


def _opcodes(session: Session, digests: Iterable[str]) -> dict[str, dict[str, int]]:
    wanted = sorted(set(digests))
    if not wanted:
        return {}
    return dict(session.execute(sa.select(CodeListing.digest, CodeListing.opcodes)
                                .where(CodeListing.digest.in_(wanted))).all())


def _moved(head: Mapping[str, int], base: Mapping[str, int]) -> dict[str, int]:
    """name -> head - base, the nonzero ones, largest move first (then by name)."""
    deltas = {k: head.get(k, 0) - base.get(k, 0) for k in {*head, *base}}
    return {k: d for k, d in sorted(deltas.items(), key=lambda kv: (-abs(kv[1]), kv[0])) if d}


def _figure(name: str, base: int | None, head: int | None, *, always: bool, unit: str = "") -> str | None:
    """"regs 208 → 224" when it moved, "spills 0" when it did not (and `always`), None when unknown."""
    if base != head and base is not None and head is not None:
        return f"{name} {base} → {head}{unit}"
    return f"{name} {head}{unit}" if always and head is not None else None


def _change(head: _Code, base: _Code | None, opcodes: Mapping[str, dict[str, int]]) -> CodeChangeOut:
    total = (head.instructions or {}).get("total")
    base_total = (base.instructions or {}).get("total") if base else None
    figures = {"registers": (base.registers if base else None, head.registers),
                   "spills": (base.spills if base else None, head.spills),
                   "shared_bytes": (base.shared_bytes if base else None, head.shared_bytes)}
    common: dict[str, Any] = dict(head_digest=head.digest, base_digest=base.digest if base else None,
                                  head_instructions=total, base_instructions=base_total, unavailable=head.unavailable,
                                  **figures)
    if head.digest is None:
        return CodeChangeOut(state="not disassembled", summary=f"not disassembled: {head.unavailable or 'no listing'}",
                             classes={}, opcodes={}, diff=False, **common)
    if base is None or base.digest is None:
        why = "the base did not build it" if base is None else f"base not disassembled: {base.unavailable or 'no listing'}"
        return CodeChangeOut(state="no base code", summary=f"{total} instr; {why}", classes={}, opcodes={}, diff=False,
                             **common)
    if base.digest == head.digest:
        return CodeChangeOut(state="same code", summary="same code", classes={}, opcodes={}, diff=True, **common)
    classes = _moved((head.instructions or {}).get("by_class", {}), (base.instructions or {}).get("by_class", {}))
    stored = head.digest in opcodes and base.digest in opcodes
    moved = _moved(opcodes[head.digest], opcodes[base.digest]) if stored else {}
    named = moved or {k.replace("_", " "): v for k, v in classes.items()}
    words = [f"{d:+d} {name}" for name, d in list(named.items())[:TOP_OPCODES]]
    count = f"{(total or 0) - (base_total or 0):+d} instr" if total is not None and base_total is not None else "instr ?"
    parts = [count + (": " + ", ".join(words) if words else " (same mix, other code)")]
    parts += [p for p in (_figure("regs", *figures["registers"], always=True),
                          _figure("spills", *figures["spills"], always=True),
                          _figure("shared", *figures["shared_bytes"], always=False, unit=" B")) if p]
    return CodeChangeOut(state="changed", summary="; ".join(parts), classes=classes, opcodes=moved, diff=stored,
                         **common)


def code_changes(session: Session, repository: str, pairs: Mapping[tuple[int, str], tuple[int, int | None]]
                 ) -> dict[tuple[int, str], CodeChangeOut]:
    """(case pk, target) -> its code at the head against the base's (module doc), for each key of
    `pairs` (-> (head commit id, base commit id or None)) whose head's bundle built it and said
    anything of its code (a bundle made before code evidence, or a vendor control, says nothing)."""
    if not pairs:
        return {}
    commits = sorted({c for pair in pairs.values() for c in pair if c is not None})
    evidence = _evidence(session, repository, commits)
    found: dict[tuple[int, str], tuple[_Code, _Code | None]] = {}
    for (case_pk, target), (head_id, base_id) in pairs.items():
        head = evidence.get((head_id, case_pk, target))
        if head is None or (head.digest is None and head.unavailable is None):
            continue
        found[(case_pk, target)] = (head, evidence.get((base_id, case_pk, target)) if base_id is not None else None)
    changed = [d for head, base in found.values() if base is not None and head.digest != base.digest
               for d in (head.digest, base.digest) if d is not None]
    opcodes = _opcodes(session, changed)
    return {key: _change(head, base, opcodes) for key, (head, base) in found.items()}


# ---- diffs ------------------------------------------------------------------------------------------


def unified_diff(base: str, head: str, *, context: int = 3, max_lines: int | None = None) -> tuple[list[str], int]:
    """The unified diff of two listings (base first), and how many of its lines were left out past
    `max_lines` (the hunks' headers say where each part is)."""
    lines = list(difflib.unified_diff(base.splitlines(), head.splitlines(), "base", "head", n=context, lineterm=""))
    if max_lines is None or len(lines) <= max_lines:
        return lines, 0
    return lines[:max_lines], len(lines) - max_lines


@dataclass(frozen=True)
class DiffRow:
    """One line of a side-by-side diff: `kind` equal | delete | insert | replace | gap (lines left out)."""

    kind: str
    base_number: int | None
    base: str
    head_number: int | None
    head: str


def side_by_side(base: str, head: str, *, context: int = 3, max_rows: int = 400) -> tuple[list[DiffRow], int]:
    """The changed parts of two listings side by side, `context` equal lines around each, a gap row
    between parts; and how many rows were left out past `max_rows`."""
    a, b = base.splitlines(), head.splitlines()
    rows: list[DiffRow] = []
    for number, group in enumerate(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context)):
        if number:
            rows.append(DiffRow("gap", None, "", None, ""))
        for tag, i1, i2, j1, j2 in group:
            for k in range(max(i2 - i1, j2 - j1)):
                left, right = i1 + k < i2, j1 + k < j2
                kind = tag if tag != "replace" or (left and right) else ("delete" if left else "insert")
                rows.append(DiffRow(kind, i1 + k + 1 if left else None, a[i1 + k] if left else "",
                                    j1 + k + 1 if right else None, b[j1 + k] if right else ""))
    return rows[:max_rows], max(0, len(rows) - max_rows)
