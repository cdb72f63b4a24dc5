"""pytest-benchmark JSON (`--benchmark-json FILE`, or a saved run from `--benchmark-save` / `--benchmark-autosave`).

- the name the mapping matches is the test's `fullname`, e.g. `tests/test_gemm.py::test_gemm[64]`
  (in a glob rule `[64]` is a character class: use `exact` or `regex` rules for such names);
- samples: `stats.data`, one time per round, already divided by the round's iterations, in
  seconds (a `--benchmark-json` export always holds it; a saved run only with
  `--benchmark-save-data`). Without it the file has statistics only, and the case gets ONE
  sample, `stats.median`, with `pytest_benchmark.rounds` in its environment;
- every time is checked (a number, finite, positive) with the field named.
"""

from __future__ import annotations

from typing import Any

from pipeline.contracts import ContractError
from pipeline.contracts.foreign._common import (
    DEVICE_NAME_MAX,
    HOST_NAME_MAX,
    Benchmark,
    Parsed,
    Problems,
    as_list,
    as_object,
    as_str,
    as_text,
    as_time,
)

NAME = "pytest-benchmark"
DOCUMENT = "pytest-benchmark JSON"


def parse(data: Any) -> Parsed:
    problems = Problems(DOCUMENT)
    if not isinstance(data, dict):
        raise ContractError(DOCUMENT, [("data", f"must be a JSON object, got {type(data).__name__}")])
    if "benchmarks" not in data:
        problems.add("benchmarks", "missing; not a pytest-benchmark JSON file")
        problems.raise_if_any()
    benchmarks = []
    for i, raw in enumerate(as_list(data["benchmarks"], "benchmarks", problems) or []):
        path = f"benchmarks.{i}"
        entry = as_object(raw, path, problems)
        name = as_str(entry.get("fullname", entry.get("name")), f"{path}.fullname", problems) if entry else None
        stats = as_object(entry.get("stats"), f"{path}.stats", problems) if entry else None
        if entry is None or name is None or stats is None:
            continue
        environment = {"pytest_benchmark.rounds": str(stats.get("rounds")),
                       "pytest_benchmark.iterations": str(stats.get("iterations"))}
        if "data" in stats:
            raw_samples = as_list(stats["data"], f"{path}.stats.data", problems)
            if raw_samples is None:
                continue
            if not raw_samples:
                problems.add(f"{path}.stats.data", "empty; a benchmark needs at least one round")
                continue
            times = [as_time(v, "s", f"{path}.stats.data.{j}", problems) for j, v in enumerate(raw_samples)]
            samples = [t for t in times if t is not None]
            if len(samples) != len(times):
                continue
            environment["pytest_benchmark.sample"] = "stats.data"
        else:
            median = as_time(stats.get("median"), "s", f"{path}.stats.median", problems)
            if median is None:
                continue
            samples = [median]
            environment["pytest_benchmark.sample"] = "stats.median (no stats.data: export with --benchmark-json or save with --benchmark-save-data)"
        benchmarks.append(Benchmark(name=name, field=path, samples=samples, environment=environment))
    problems.raise_if_any()
    machine = data.get("machine_info")
    machine = machine if isinstance(machine, dict) else {}
    cpu = machine.get("cpu")
    cpu = cpu if isinstance(cpu, dict) else {}
    environment = {"pytest_benchmark.version": str(data.get("version", ""))}
    if machine.get("python_version"):
        environment["python"] = str(machine["python_version"])
    host = as_text(machine.get("node"), "machine_info.node", problems, HOST_NAME_MAX)
    device_name = as_text(cpu.get("brand_raw"), "machine_info.cpu.brand_raw", problems, DEVICE_NAME_MAX)
    problems.raise_if_any()
    return Parsed(tool=NAME, benchmarks=benchmarks, host=host, device_name=device_name, environment=environment)
