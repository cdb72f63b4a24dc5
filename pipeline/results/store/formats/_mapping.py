"""The declared mapping of a foreign file onto benchfarm's identities (cases, targets, device class,
commit), sent with the file."""

from __future__ import annotations

import re
import string
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline.contracts.ids import CASE_ID_PATTERN, DeviceClassName, TargetStr
from pipeline.contracts.manifest import Sha
from pipeline.results.store.states import RUN_KINDS


def _placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


class CaseRule(BaseModel):
    """Benchmarks whose name matches `pattern` are stored as `case` on `target`.

    `match`: `glob` (fnmatch: `*`, `?`, `[...]`), `regex` (the whole name must match; named groups
    fill `{group}` placeholders of `case`), or `exact`.
    """

    model_config = ConfigDict(extra="forbid")

    pattern: str = Field(min_length=1, max_length=1000)
    match: Literal["glob", "regex", "exact"] = "glob"
    case: str = Field(min_length=1, max_length=400,
                      description="case id family/name/shape/dtype/impl; with regex, may hold {group} placeholders")
    target: TargetStr

    @model_validator(mode="after")
    def _consistent(self) -> CaseRule:
        try:
            wanted = _placeholders(self.case)
        except ValueError as exc:
            raise ValueError(f"case {self.case!r} is not a valid template: {exc}") from None
        if self.match == "regex":
            try:
                groups = set(re.compile(self.pattern).groupindex)
            except re.error as exc:
                raise ValueError(f"pattern {self.pattern!r} is not a regular expression: {exc}") from None
            if wanted - groups:
                raise ValueError(f"case uses {{{min(wanted - groups)}}}, which is no named group of the pattern")
        elif wanted:
            raise ValueError("case placeholders need a regex rule with named groups")
        if not wanted and not re.match(CASE_ID_PATTERN, self.case):
            raise ValueError(f"case {self.case!r} is not a case id family/name/shape/dtype/impl")
        return self

    def case_for(self, name: str) -> str | None:
        """The case id this rule gives `name`, or None when the rule does not match it."""
        if self.match == "exact":
            return self.case if name == self.pattern else None
        if self.match == "glob":
            return self.case if fnmatchcase(name, self.pattern) else None
        found = re.fullmatch(self.pattern, name)
        if found is None:
            return None
        return self.case.format_map({k: v or "" for k, v in found.groupdict().items()})


class FormatMapping(BaseModel):
    """Where the results of one foreign file go.

    The file's results form one job: by default a run of `kind` made for the file (its id derived
    from the file and this mapping, so sending both again is a duplicate and stores nothing), or
    the existing job `job_id`, which must be of a run of `commit` on `device_class`. The commit
    must be recorded and the cases registered (by a bundle manifest), as for any result document.
    """

    model_config = ConfigDict(extra="forbid")

    repository: str = Field(min_length=1, max_length=200)
    commit: Sha
    device_class: DeviceClassName
    rules: list[CaseRule] = Field(min_length=1, description="first matching rule wins")
    unmapped: Literal["error", "ignore"] = Field(
        "error", description="benchmarks no rule matches: refuse the file naming them, or leave them out")
    job_id: str | None = Field(None, min_length=1, max_length=64, description="attach to this existing job")
    kind: str = Field("adhoc", description=f"kind of the run made for the file (when no job_id): {', '.join(RUN_KINDS)}")
    device_uid: str = Field("", max_length=200,
                            description="stable id of the device measured; empty: import:<device class>:<host>")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in RUN_KINDS:
            raise ValueError(f"{value!r} is not one of {', '.join(RUN_KINDS)}")
        return value
