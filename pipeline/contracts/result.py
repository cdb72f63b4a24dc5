"""Result document: what a device agent measured for one job (docs/design.md, "Contracts").

Text fields the store keeps in bounded columns are bounded here, at the columns' lengths: a longer
value is refused naming its field on every store (PostgreSQL would refuse it with a driver error,
SQLite would keep it)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.contracts.arrays import ReadingArray, SampleArray
from pipeline.contracts.counters import HardwareCounters
from pipeline.contracts.ids import CaseIdStr, DeviceClassName, TargetStr
from pipeline.contracts.limits import Int
from pipeline.contracts.manifest import Sha
from pipeline.contracts.text import Environment

BinaryDigest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
"""sha256 (hex) of what was timed: the artifact's bytes, the runner, the launch description and the
input specification (`pipeline.contracts.manifest.binary_digest`)."""
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class DeviceInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device_class: DeviceClassName
    uid: str = Field(min_length=1, max_length=200, description="stable unique id: GPU UUID, adb serial, host id")
    name: str = Field("", max_length=200)
    driver: str | None = Field(None, max_length=200)
    host: str = Field("", max_length=200)
    clocks_mhz: dict[str, Finite] = Field(default_factory=dict)
    temperature_c: Finite | None = None


class AgentInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    version: str = Field(max_length=100)


class SampleStats(BaseModel):
    """Summary of the samples; always recomputable from them."""

    model_config = ConfigDict(extra="forbid")

    n: Int = Field(ge=1)
    median: PositiveSeconds
    mean: PositiveSeconds
    stdev: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    min: PositiveSeconds
    max: PositiveSeconds


class Correctness(BaseModel):
    model_config = ConfigDict(extra="forbid")

    passed: bool
    max_abs_error: Annotated[float, Field(ge=0)]
    max_rel_error: Annotated[float, Field(ge=0)]
    atol: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    rtol: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    detail: str = ""


class PairedBase(BaseModel):
    """The base commit's samples, taken interleaved with this result's on the same device in one job.

    `samples[i]` was timed back to back with the result's own `samples[i]` (same round, same device,
    same clocks and temperature as near as the agent could make them), so `head[i] / base[i]` is a
    paired ratio in which slow drift of the device cancels (docs/design.md, "Measurement": pair what is
    compared).
    """

    model_config = ConfigDict(extra="forbid")

    commit: Sha = Field(description="the base commit whose bundle was run interleaved with this one")
    samples: SampleArray = Field(min_length=1, description="one per sample of the result, same order")
    binary_digest: BinaryDigest | None = Field(
        default=None, description="the base entry's binary digest (CaseResult.binary_digest); equal to the "
        "head's: the pair timed identical code, an A/A calibration of the case's noise")
    counters: HardwareCounters | None = Field(
        default=None, description="the base binary's hardware counters, taken on the same inputs as the result's own")
    code_digest: BinaryDigest | None = Field(
        default=None, description="the base entry's code digest (CaseResult.code_digest); equal to the head's: "
        "the pair timed the same instructions, launch and inputs (a rename), never a change")


class CaseResult(BaseModel):
    """One case on one target: every latency sample and the statistics, or the reason there are none."""

    model_config = ConfigDict(extra="forbid")

    case: CaseIdStr
    target: TargetStr
    status: Literal["ok", "wrong", "error", "skipped"]
    reason: str | None = None
    metric: Literal["latency"] = "latency"
    unit: Literal["s"] = "s"
    samples: SampleArray = Field(default_factory=list)
    sample_clocks_mhz: ReadingArray | None = Field(
        default=None, description="SM clock read with each sample, same length as samples"
    )
    sample_temperatures_c: ReadingArray | None = Field(
        default=None, description="GPU temperature read with each sample, same length as samples"
    )
    stats: SampleStats | None = None
    correctness: Correctness | None = None
    environment: Environment = Field(default_factory=dict)
    paired_base: PairedBase | None = Field(
        default=None, description="when the job ran base and head interleaved: the base's samples, paired by index"
    )
    rounds: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, description="samples taken in each timing round, in order (sum = number of samples): the "
        "round, not the sample, is the unit of replication of the statistics (docs/design.md, 'Measurement')")
    binary_digest: BinaryDigest | None = Field(
        default=None, description="what was timed (artifact, runner, launch, inputs); equal digests on one device "
        "class mean identical code")
    counters: HardwareCounters | None = Field(
        default=None, description="hardware counters of one launch on the check's inputs, outside the timed rounds "
        "(pipeline.contracts.counters); where there are none, environment['counters'] says why")
    code_digest: BinaryDigest | None = Field(
        default=None, description="what was timed, names aside (the manifest entry's code digest: its listing's "
        "digest, launch and inputs); equal digests on one device class mean the same code; absent where no "
        "disassembler read it")

    @model_validator(mode="after")
    def _stats_or_reason(self) -> CaseResult:
        if self.status == "ok":
            if not self.samples or self.stats is None:
                raise ValueError("status ok needs samples and stats")
            if self.stats.n != len(self.samples):
                raise ValueError(f"stats.n is {self.stats.n} but there are {len(self.samples)} samples")
            if self.reason is not None:
                raise ValueError("status ok has no reason")
            if self.correctness is not None and not self.correctness.passed:
                raise ValueError("status ok with a failed correctness check; report it as wrong")
        else:
            if not self.reason:
                raise ValueError(f"status {self.status} needs a reason")
            if self.samples or self.stats is not None:
                raise ValueError(f"status {self.status} carries no samples or stats")
            if self.counters is not None:
                raise ValueError(f"status {self.status} carries no counters")
        if self.sample_clocks_mhz is not None and len(self.sample_clocks_mhz) != len(self.samples):
            raise ValueError("sample_clocks_mhz must have one entry per sample")
        if self.sample_temperatures_c is not None and len(self.sample_temperatures_c) != len(self.samples):
            raise ValueError("sample_temperatures_c must have one entry per sample")
        if self.rounds is not None and sum(self.rounds) != len(self.samples):
            raise ValueError(f"rounds add up to {sum(self.rounds)} samples but there are {len(self.samples)}")
        if self.paired_base is not None:
            if self.status != "ok":
                raise ValueError(f"status {self.status} carries no paired_base")
            if len(self.paired_base.samples) != len(self.samples):
                raise ValueError(f"paired_base has {len(self.paired_base.samples)} samples for {len(self.samples)} "
                                 "samples; they pair by index")
        return self


class ResultDocument(BaseModel):
    """Uploaded by an agent once per job; ingest is idempotent on (job, case, target)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    run_id: str = Field(min_length=1, max_length=64)
    job_id: str = Field(min_length=1, max_length=64)
    repository: str = Field(min_length=1, max_length=200)
    commit: Sha
    bundle_digest: str | None = Field(None, max_length=64)
    device: DeviceInfo
    agent: AgentInfo
    started_at: datetime
    finished_at: datetime
    environment: Environment = Field(default_factory=dict)
    results: list[CaseResult]

    @model_validator(mode="after")
    def _unique_results(self) -> ResultDocument:
        seen: set[tuple[str, str]] = set()
        for result in self.results:
            key = (result.case, result.target)
            if key in seen:
                raise ValueError(f"duplicate result for {result.case} on {result.target}")
            seen.add(key)
            if result.paired_base is not None and result.paired_base.commit == self.commit:
                raise ValueError(f"{result.case} on {result.target}: paired_base.commit is the document's own commit")
        if self.finished_at < self.started_at:
            raise ValueError("finished_at is before started_at")
        return self


def summarize(samples: Sequence[float]) -> SampleStats:
    """n, median, mean, sample standard deviation (n - 1 denominator; 0 for a single sample), min, max.

    Raises ValueError for an empty sequence, and (through SampleStats) for non-positive or
    non-finite values.
    """
    if not samples:
        raise ValueError("cannot summarize no samples")
    values = [float(v) for v in samples]
    n = len(values)
    mean = math.fsum(values) / n
    # Two passes with fsum: correctly rounded sums, within an ulp or two of statistics.stdev's
    # exact fractions and ~20 times faster (ingest summarizes every case result it stores).
    stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return SampleStats(n=n, median=statistics.median(values), mean=mean, stdev=stdev, min=min(values), max=max(values))
