"""Google Benchmark JSON (`--benchmark_format=json` / `--benchmark_out`), as iree-benchmark-module
and every C++ benchmark built on the library write it.

- the name the mapping matches is `run_name` (the name without an aggregate's suffix), or `name`;
- samples: the entries with `run_type` "iteration", one per repetition (`--benchmark_repetitions`),
  each its `real_time` (wall time per iteration, the mean over that repetition's `iterations`)
  converted from `time_unit`. Aggregates (mean, median, stddev, cv) are ignored: the store
  recomputes statistics from the samples. A file with aggregates only
  (`--benchmark_report_aggregates_only`) is refused, since it has no samples;
- an entry with `error_occurred` becomes a case result with status error and its
  `error_message`; `skipped` (library 1.8+) becomes status skipped;
- `context.json_schema_version`, when present, must be 1 (the integer); `context.host_name` at most 64
  characters.
"""

from __future__ import annotations

from typing import Any

from pipeline.contracts import ContractError
from pipeline.contracts.foreign._common import (
    HOST_NAME_MAX,
    UNIT_SECONDS,
    Benchmark,
    Parsed,
    Problems,
    as_list,
    as_object,
    as_str,
    as_text,
    as_time,
    as_version,
)

NAME = "google-benchmark"
SCHEMA_VERSION = 1
DOCUMENT = "Google Benchmark JSON"


def parse(data: Any) -> Parsed:
    problems = Problems(DOCUMENT)
    if not isinstance(data, dict):
        raise ContractError(DOCUMENT, [("data", f"must be a JSON object, got {type(data).__name__}")])
    root = data
    context = root.get("context", {})
    if not isinstance(context, dict):
        problems.add("context", "must be a JSON object")
        context = {}
    if not as_version(context.get("json_schema_version", SCHEMA_VERSION), SCHEMA_VERSION, "context.json_schema_version",
                      problems, str(SCHEMA_VERSION)):
        problems.raise_if_any()
    host = as_text(context.get("host_name"), "context.host_name", problems, HOST_NAME_MAX)
    if "benchmarks" not in root:
        problems.add("benchmarks", "missing; not a Google Benchmark JSON file")
        problems.raise_if_any()
    entries = as_list(root["benchmarks"], "benchmarks", problems) or []

    samples: dict[str, list[float]] = {}
    first_field: dict[str, str] = {}
    failures: dict[str, tuple[str | None, str | None]] = {}
    aggregates_only: set[str] = set()
    for i, raw in enumerate(entries):
        path = f"benchmarks.{i}"
        entry = as_object(raw, path, problems)
        if entry is None:
            continue
        name = as_str(entry.get("run_name", entry.get("name")), f"{path}.run_name", problems)
        if name is None:
            continue
        first_field.setdefault(name, path)
        if entry.get("error_occurred"):
            failures[name] = (str(entry.get("error_message") or "error_occurred without a message"), None)
            continue
        if entry.get("skipped"):
            failures[name] = (None, str(entry.get("skip_message") or "skipped"))
            continue
        run_type = entry.get("run_type", "iteration")
        if run_type == "aggregate":
            aggregates_only.add(name)
            continue
        if run_type != "iteration":
            problems.add(f"{path}.run_type", f"unknown run_type {run_type!r}; expected iteration or aggregate")
            continue
        unit = entry.get("time_unit", "ns")
        if not isinstance(unit, str) or unit not in UNIT_SECONDS:
            problems.add(f"{path}.time_unit", f"unknown time unit {unit!r}; expected one of {', '.join(UNIT_SECONDS)}")
            continue
        seconds = as_time(entry.get("real_time"), unit, f"{path}.real_time", problems)
        if seconds is not None:
            samples.setdefault(name, []).append(seconds)
    for name in sorted(aggregates_only - samples.keys() - failures.keys()):
        problems.add(first_field[name], f"{name}: aggregates only, no per-repetition entries; run without "
                                        "--benchmark_report_aggregates_only")
    problems.raise_if_any()

    benchmarks = []
    for name, path in first_field.items():
        if name in failures:
            error, skipped = failures[name]
            benchmarks.append(Benchmark(name=name, field=path, error=error, skipped=skipped))
        elif name in samples:
            benchmarks.append(Benchmark(name=name, field=path, samples=samples[name]))
    environment = {f"context.{k}": str(context[k]) for k in ("executable", "library_version", "mhz_per_cpu", "num_cpus")
                   if k in context}
    return Parsed(tool=NAME, benchmarks=benchmarks, host=host, environment=environment)
