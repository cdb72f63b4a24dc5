"""NVBench JSON (`--json FILE`), file format 1.x (`meta.version.json`).

NVBench writes one summary list per state (one state = one point of the benchmark's axes on
one device); every value is a string. What is used:
- the name the mapping matches is `<benchmark name>[<state name>]`, e.g.
  `gemm_bf16[Device=0 M=4096 N=4096]` (the state name is NVBench's axis values as a string);
- the samples: NVBench keeps per-sample times in side files (`nv/json/bin:nv/cold/sample_times`:
  raw little-endian float32 seconds, `size` of them, written with `--jsonbin`). When the import
  carries the referenced file (`files`, by the name the summary gives), every sample time is a
  sample, and two imports compare like any two runs. Without it each state gives ONE sample,
  `nv/cold/time/gpu/mean` (the mean isolated GPU time, cold L2): enough for the history and its
  change points, not for a per-commit test (compare reports insufficient data). Either way the
  summary's noise (`nv/cold/time/gpu/stdev/relative`), sample count (`nv/cold/sample_size`) and
  min/max are kept in the case result's environment;
- a skipped state (`is_skipped`) becomes status skipped with its `skip_reason`.

Checked against a real file: `tests/data/nvbench_real.json`, written by NVBench's Python
package cuda-bench 0.3.0 on an H200 (`bench/nvbench_reference.py --set small`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.contracts import ContractError
from pipeline.contracts.foreign._common import (
    DEVICE_NAME_MAX,
    Benchmark,
    Parsed,
    Problems,
    as_list,
    as_object,
    as_str,
    as_text,
    as_time,
    as_version,
    is_int,
)

NAME = "nvbench"
DOCUMENT = "NVBench JSON"
JSON_MAJOR = 1
TIME_TAG = "nv/cold/time/gpu/mean"
SAMPLE_TIMES_TAG = "nv/json/bin:nv/cold/sample_times"
KEPT_TAGS = {
    "nv/cold/time/gpu/stdev/relative": "nvbench.noise",
    "nv/cold/sample_size": "nvbench.sample_size",
    "nv/cold/time/gpu/min": "nvbench.gpu_min_s",
    "nv/cold/time/gpu/max": "nvbench.gpu_max_s",
}


def _optional_object(container: dict[str, Any], key: str, path: str, problems: Problems) -> dict[str, Any]:
    """`container[key]` when it is an object; {} when absent; a problem (and {}) when it is anything else."""
    value = container.get(key)
    if value is None:
        return {}
    return as_object(value, path, problems) or {}


def _summary_data(summary: dict[str, Any], path: str, problems: Problems) -> list[dict[str, Any]]:
    """A summary's `data`: a list of {name, type, value} objects (a problem when it is not a list)."""
    data = summary.get("data")
    if data is None:
        return []
    return [d for d in as_list(data, f"{path}.data", problems) or [] if isinstance(d, dict)]


def _summary_value(summary: dict[str, Any], path: str, problems: Problems) -> Any:
    for value in _summary_data(summary, path, problems):
        if value.get("name") == "value":
            return value.get("value")
    return None


def _devices(data: dict[str, Any], problems: Problems) -> dict[int, str]:
    """Device id -> name, from `devices` (a list of objects whose id is an integer)."""
    devices: dict[int, str] = {}
    raw = data.get("devices")
    for i, device in enumerate(as_list(raw, "devices", problems) or [] if raw is not None else []):
        if not isinstance(device, dict):
            problems.add(f"devices.{i}", f"must be a JSON object, got {type(device).__name__}")
        elif not is_int(device.get("id")):
            problems.add(f"devices.{i}.id", f"must be an integer, got {device.get('id')!r}"[:200])
        else:
            devices[device["id"]] = as_text(device.get("name"), f"devices.{i}.name", problems, DEVICE_NAME_MAX)
    return devices


def _sample_times(summary: dict[str, Any], files: Mapping[str, bytes], path: str, problems: Problems
                  ) -> list[float] | None:
    """The per-sample times of a `SAMPLE_TIMES_TAG` summary from its side file; None when the file
    was not uploaded."""
    fields = {d.get("name"): d.get("value") for d in _summary_data(summary, path, problems)
              if isinstance(d.get("name"), str)}
    name, size = fields.get("filename"), fields.get("size")
    if not isinstance(name, str) or name not in files:
        return None
    try:
        if not isinstance(size, (str, int, float)):   # JSON's other values: null, lists, objects
            raise TypeError(size)
        count = int(size)
    except (TypeError, ValueError):
        problems.add(f"{path}.data", f"size {size!r} is not a count")
        return None
    raw = files[name]
    if len(raw) != 4 * count:
        problems.add(f"{path}.data", f"{name}: {len(raw)} bytes, not {count} float32 sample times")
        return None
    times = np.frombuffer(raw, dtype="<f4").astype(float)
    if not all(math.isfinite(t) and t > 0 for t in times):
        problems.add(f"{path}.data", f"{name}: sample times must be finite and positive")
        return None
    values: list[float] = times.tolist()
    return values


def parse(data: Any, files: Mapping[str, bytes] | None = None) -> Parsed:
    """`data`: the NVBench JSON; `files`: the side files it references (name -> bytes)."""
    files = files or {}
    problems = Problems(DOCUMENT)
    if not isinstance(data, dict):
        raise ContractError(DOCUMENT, [("data", f"must be a JSON object, got {type(data).__name__}")])
    meta = _optional_object(data, "meta", "meta", problems)
    versions = _optional_object(meta, "version", "meta.version", problems)
    version = _optional_object(versions, "json", "meta.version.json", problems)
    problems.raise_if_any()
    if not as_version(version.get("major", JSON_MAJOR), JSON_MAJOR, "meta.version.json.major", problems,
                      f"NVBench JSON {JSON_MAJOR}.x"):
        problems.raise_if_any()
    if "benchmarks" not in data:
        problems.add("benchmarks", "missing; not an NVBench JSON file")
        problems.raise_if_any()

    devices = _devices(data, problems)
    benchmarks: list[Benchmark] = []
    for b, raw_bench in enumerate(as_list(data["benchmarks"], "benchmarks", problems) or []):
        bench = as_object(raw_bench, f"benchmarks.{b}", problems)
        bench_name = as_str(bench.get("name"), f"benchmarks.{b}.name", problems) if bench else None
        if bench is None or bench_name is None:
            continue
        for s, raw_state in enumerate(as_list(bench.get("states"), f"benchmarks.{b}.states", problems) or []):
            path = f"benchmarks.{b}.states.{s}"
            state = as_object(raw_state, path, problems)
            state_name = as_str(state.get("name", state.get("description")), f"{path}.name", problems) if state else None
            if state is None or state_name is None:
                continue
            name = f"{bench_name}[{state_name}]"
            if state.get("is_skipped"):
                benchmarks.append(Benchmark(name=name, field=path, skipped=str(state.get("skip_reason") or "skipped")))
                continue
            summaries = {}
            for k, raw_summary in enumerate(as_list(state.get("summaries"), f"{path}.summaries", problems) or []):
                summary = as_object(raw_summary, f"{path}.summaries.{k}", problems)
                if summary is not None and isinstance(summary.get("tag"), str):
                    summaries[summary["tag"]] = (k, summary)
            if TIME_TAG not in summaries:
                problems.add(f"{path}.summaries", f"{name}: no {TIME_TAG} summary (was the state measured cold on a GPU?)")
                continue
            k, summary = summaries[TIME_TAG]
            seconds = as_time(_summary_value(summary, f"{path}.summaries.{k}", problems), "s",
                              f"{path}.summaries.{k}.data.value", problems, numeric_strings=True)
            if seconds is None:
                continue
            environment = {key: str(_summary_value(summaries[tag][1], f"{path}.summaries.{summaries[tag][0]}", problems))
                           for tag, key in KEPT_TAGS.items() if tag in summaries}
            environment["nvbench.sample"] = TIME_TAG
            samples = [seconds]
            if SAMPLE_TIMES_TAG in summaries:
                k_bin, bin_summary = summaries[SAMPLE_TIMES_TAG]
                times = _sample_times(bin_summary, files, f"{path}.summaries.{k_bin}", problems)
                if times is not None:
                    samples, environment["nvbench.sample"] = times, SAMPLE_TIMES_TAG
            device = state.get("device")
            if device is not None and not is_int(device):
                problems.add(f"{path}.device", f"must be a device id (an integer), got {device!r}"[:200])
                continue
            if device in devices:
                environment["nvbench.device"] = devices[device]
            benchmarks.append(Benchmark(name=name, field=path, samples=samples, environment=environment))
    problems.raise_if_any()
    nvbench_version = _optional_object(versions, "nvbench", "meta.version.nvbench", problems)
    problems.raise_if_any()
    run_environment: dict[str, str] = {}
    # The Python package's NVBench says "0.1.0" in `string`; its release is in `git_version`
    # (cuda-bench 0.3.0: "python-0.3.0").
    for field, key in (("string", "nvbench.version"), ("git_version", "nvbench.git_version")):
        if nvbench_version.get(field):
            run_environment[key] = str(nvbench_version[field])[:200]
    return Parsed(tool=NAME, benchmarks=benchmarks, device_name=next(iter(devices.values()), ""),
                  environment=run_environment)
