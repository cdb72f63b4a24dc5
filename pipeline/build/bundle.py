"""Build a bundle: the suite at a commit, compiled for every target, with its manifest.

Layout of a bundle directory (it appears atomically: built beside it, then renamed):

    manifest.json                 BundleManifest
    artifacts/<sha256>.vmfb       compiled IREE modules, named by content
    artifacts/<sha256>.cubin      compiled Triton kernels for cuda targets
    artifacts/<sha256>.hsaco      compiled Triton kernels for hip targets (build-only for now)
    code/<sha256>.txt             each artifact's normalized instruction listing, named by its digest
                                  (`pipeline.build.disassembly`; the entry's `code`)
    suite/                        the suite's sources at the commit (references are imported from here)

Each case's source picks its compiler (IreeSource -> iree-compile, TritonSource -> triton). Compiles
run in worker processes and go through a content-addressed cache, so a kernel whose source, flags,
compiler and target did not change is never compiled twice. A vendor control (TorchSource) compiles
nothing: its entry records the PyTorch call and has no artifact; it is built for CUDA targets only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pipeline.build import disassembly, iree_compiler, triton_compiler
from pipeline.build.compiled import CompiledArtifact, CompileError
from pipeline.build.suite_api import (
    IreeSource,
    KernelCase,
    KernelSource,
    TorchSource,
    TritonSource,
)
from pipeline.build.suite_loader import (
    SuiteLocation,
    export_suite,
    load_suite,
    suite_digest,
)
from pipeline.contracts import (
    BundleEntry,
    BundleManifest,
    CodeEvidence,
    CompileStats,
    LaunchSpec,
    Target,
    TorchCall,
)
from pipeline.contracts.bundle_dir import MANIFEST, load_bundle
from pipeline.contracts.manifest import ArtifactRef
from pipeline.host_lock import compiling
from pipeline.progress import ProgressFn

log = logging.getLogger(__name__)

__all__ = ["ALL_TARGETS", "BuildCounts", "build_bundle", "load_bundle", "MANIFEST", "SUITE_DIR"]

ALL_TARGETS = (
    "llvm-cpu:x86_64", "llvm-cpu:aarch64", "llvm-cpu:aarch64-android", "vulkan:valhall", "vulkan:adreno",
    "cuda:sm_80", "cuda:sm_90", "hip:gfx942", "hip:gfx950", "hip:gfx1250",
)
"""Every target this builder's compilers produce code for on a CPU-only machine (`--targets all`):
IREE for the CPUs, Vulkan, CUDA sm_80 and HIP; Triton for cuda:sm_90 and HIP."""
SUITE_DIR = "suite"
ARTIFACTS_DIR = "artifacts"



@dataclass
class BuildCounts:
    """What one build_bundle call did (pass one in to read it back)."""

    compiled: int = 0
    cached: int = 0
    failed: int = 0
    reused_bundle: bool = False


@dataclass(frozen=True)
class _Job:
    case: KernelCase
    target: Target
    source: KernelSource | None = None
    key: str = ""
    error: str | None = None

    @property
    def compiled(self) -> IreeSource | TritonSource:
        """The source a compiler takes: a job without an error that is no vendor control has one."""
        if not isinstance(self.source, (IreeSource, TritonSource)):
            raise TypeError(f"{self.case.case_id} for {self.target}: nothing to compile ({self.error or self.source})")
        return self.source


def _compiler_versions() -> dict[str, str]:
    """Every compiler this builder has, with its version (they name the bundle and key the cache)."""
    versions: dict[str, str] = {}
    try:
        versions[iree_compiler.COMPILER] = iree_compiler.compiler_version()
    except (ImportError, OSError, CompileError):   # a builder (or a GPU host building a test bundle) without IREE
        pass
    if (triton_version := triton_compiler.compiler_version()) is not None:
        versions[triton_compiler.COMPILER] = triton_version
    return versions


def _compiler_of(source: KernelSource) -> str:
    return triton_compiler.COMPILER if isinstance(source, TritonSource) else iree_compiler.COMPILER


def _unsupported(source: KernelSource, target: Target, versions: dict[str, str]) -> str | None:
    """Why this builder cannot compile `source` for `target`, or None when it can."""
    if isinstance(source, TorchSource):
        return None if target.backend == "cuda" else f"vendor (torch) controls run on cuda targets, not {target}"
    compiler = _compiler_of(source)
    if compiler not in versions:
        return f"no {compiler} in this builder"
    supported = triton_compiler.is_supported if compiler == triton_compiler.COMPILER else iree_compiler.is_supported
    return None if supported(target) else f"no compiler in this builder for target {target} ({compiler})"


def _artifact_suffix(source: KernelSource, target: Target) -> str:
    if isinstance(source, TritonSource):
        return ".hsaco" if target.backend == "hip" else ".cubin"
    return ".vmfb"


def _cache_key(source: IreeSource | TritonSource, target: Target, versions: dict[str, str], suite_dir: Path) -> str:
    """Source digest, specialization, compiler and version, target and flags: equal keys, equal artifacts;
    and the disassemblers with the normalization: equal keys, equal listings."""
    compiler = _compiler_of(source)
    material: dict[str, object]
    if isinstance(source, TritonSource):
        material = {**triton_compiler.source_material(source, suite_dir),
                    "flags": triton_compiler.compile_options(source)}
    else:
        material = {"mlir": source.mlir, "entry_point": source.entry_point,
                    "flags": iree_compiler.compile_flags(source, target)}
    material.update(compiler=compiler, compiler_version=versions[compiler], target=str(target),
                    disassembly=disassembly.tools_identity())
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _cache_paths(cache_dir: Path, key: str, suffix: str) -> tuple[Path, Path]:
    folder = cache_dir / key[:2]
    return folder / f"{key}{suffix}", folder / f"{key}.json"


def _cache_get(cache_dir: Path, key: str, suffix: str) -> CompiledArtifact | None:
    artifact, meta = _cache_paths(cache_dir, key, suffix)
    try:
        record = json.loads(meta.read_text())
        return CompiledArtifact(data=artifact.read_bytes(), stats=CompileStats.model_validate(record["stats"]),
                                launch=dict(record["launch"]), code=CodeEvidence.model_validate(record["code"]),
                                listing=str(record["listing"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _cache_put(cache_dir: Path, key: str, suffix: str, compiled: CompiledArtifact) -> None:
    artifact, meta = _cache_paths(cache_dir, key, suffix)
    _atomic_write(artifact, compiled.data)       # artifact first: an entry is complete once its record exists
    record = {"stats": compiled.stats.model_dump(mode="json"), "launch": compiled.launch,
              "code": compiled.code.model_dump(mode="json") if compiled.code is not None else None,
              "listing": compiled.listing}
    _atomic_write(meta, json.dumps(record, sort_keys=True).encode())


def _bundle_name(sha: str, digest: str, targets: Sequence[str], versions: dict[str, str]) -> str:
    # the disassemblers too: a bundle made before them (no `code`) or by others is not reused
    extra = hashlib.sha256(json.dumps([list(targets), sorted(versions.items()), disassembly.tools_identity()],
                                      sort_keys=True).encode()).hexdigest()[:8]
    return f"{sha[:12]}-{digest[:12]}-{extra}"


def _plan(cases: Sequence[KernelCase], targets: Sequence[Target], versions: dict[str, str], suite_dir: Path) -> list[_Job]:
    jobs = []
    for case in cases:
        for target in targets:
            if not case.supports(target):
                continue
            try:
                source = case.make_source(target)
                why_not = _unsupported(source, target, versions)
                key = "" if why_not or isinstance(source, TorchSource) else _cache_key(source, target, versions, suite_dir)
            except Exception as exc:  # a broken case fails alone
                jobs.append(_Job(case, target, error=f"make_source failed: {type(exc).__name__}: {exc}"))
                continue
            if why_not:
                jobs.append(_Job(case, target, error=why_not))
                continue
            jobs.append(_Job(case, target, source=source, key=key))
    return jobs


def _entry(
    job: _Job, artifact: ArtifactRef | None, stats: CompileStats | None, launch_facts: dict[str, object] | None,
    error: str | None, code: CodeEvidence | None = None,
) -> BundleEntry:
    case = job.case
    common = dict(
        case=str(case.case_id), target=str(job.target), model=case.model, tensors=list(case.tensors),
        reference=case.reference, flops=case.flops, bytes=case.bytes,
    )
    if error is not None:
        return BundleEntry(status="failed", error=error, **common)
    assert job.source is not None and launch_facts is not None
    if isinstance(job.source, TorchSource):
        call = TorchCall(op=job.source.op, params=dict(job.source.params))
        launch = LaunchSpec(entry_point=f"torch.{call.op}", arguments=list(case.arguments),
                            results=list(case.results), torch=call)
        return BundleEntry(status="built", launch=launch, **common)
    if isinstance(job.source, TritonSource):   # the cubin may be cached from a case of other sizes
        launch_facts = {**launch_facts, **triton_compiler.source_launch(job.source)}
    launch = LaunchSpec(arguments=list(case.arguments), results=list(case.results), **launch_facts)
    return BundleEntry(status="built", artifact=artifact, launch=launch, compile=stats, code=code,
                       **common)


def _store_artifact(bundle: Path, compiled: CompiledArtifact, suffix: str) -> ArtifactRef:
    """Write the artifact (and its listing, when it has one) into the bundle, named by content."""
    if compiled.code is not None and compiled.code.listing is not None and not (bundle / compiled.code.listing).exists():
        _atomic_write(bundle / compiled.code.listing, compiled.listing.encode())
    digest = hashlib.sha256(compiled.data).hexdigest()
    rel = f"{ARTIFACTS_DIR}/{digest}{suffix}"
    path = bundle / rel
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(compiled.data)
    return ArtifactRef(path=rel, sha256=digest, size_bytes=len(compiled.data))


def _compile_worker(source: IreeSource | TritonSource, target: Target, suite_dir: Path) -> CompiledArtifact:
    if isinstance(source, TritonSource):
        return triton_compiler.compile_triton(source, target, suite_dir)
    assert isinstance(source, IreeSource), f"{type(source).__name__} is not compiled"
    return iree_compiler.compile_iree(source, target)


_VENDOR = CompiledArtifact(data=b"", stats=CompileStats(compiler="none", compiler_version="", compile_time_s=0,
                                                          binary_bytes=0))   # stands for "nothing compiled"


def _report_wait(message: str, progress: ProgressFn | None) -> None:
    log.info("build: %s", message)
    if progress:
        progress(f"build: {message}", 0, 1)


def _compile_all(
    jobs: list[_Job], cache_dir: Path, suite_dir: Path, workers: int, progress: ProgressFn | None,
    counts: BuildCounts,
) -> dict[int, CompiledArtifact | str]:
    """Compiled artifact (or error text) per job index; cached ones are not compiled, vendor controls
    get `_VENDOR`."""
    results: dict[int, CompiledArtifact | str] = {}
    total, done = len(jobs), 0

    def report(what: str, job: _Job) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(f"{what} {job.case.case_id} for {job.target}", done, total)

    misses: list[int] = []
    for i, job in enumerate(jobs):
        if job.error is not None:
            results[i] = job.error
            report("failed", job)
        elif isinstance(job.source, TorchSource):   # a vendor control: nothing to compile
            results[i] = _VENDOR
            report("recorded", job)
        elif (hit := _cache_get(cache_dir, job.key, _artifact_suffix(job.compiled, job.target))) is not None:
            results[i] = hit
            counts.cached += 1
            report("cached", job)
        else:
            misses.append(i)
    if not misses:
        return results
    workers = min(workers or os.cpu_count() or 1, len(misses))
    # spawn: the parent may hold runtime threads (an agent in the same process); fork is unsafe then.
    # Workers ignore SIGINT: Ctrl-C in a terminal reaches the whole process group, and the parent
    # alone decides what an interrupt means (each worker would otherwise print its own traceback).
    # A worker re-imports the main module before its initializer runs: SIGINT in that window would
    # print its traceback. Spawned children inherit an ignored SIGINT, so the parent ignores it while
    # it starts them (main thread only: the service's builder thread cannot, and needs not, do so).
    starting = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if starting else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=signal.signal, initargs=(signal.SIGINT, signal.SIG_IGN)) as pool:
        try:
            futures: dict[Future[CompiledArtifact], int] = {
                pool.submit(_compile_worker, jobs[i].compiled, jobs[i].target, suite_dir): i
                for i in misses
            }
        finally:
            if starting:
                signal.signal(signal.SIGINT, previous)
        for future in as_completed(futures):
            i = futures[future]
            try:
                compiled = future.result()
            except CompileError as exc:  # the compile error of one case; the rest still build
                results[i] = str(exc)
                report("failed", jobs[i])
                continue
            _cache_put(cache_dir, jobs[i].key, _artifact_suffix(jobs[i].compiled, jobs[i].target), compiled)
            results[i] = compiled
            counts.compiled += 1
            report("compiled", jobs[i])
    return results


def build_bundle(
    *,
    location: SuiteLocation,
    sha: str,
    targets: Sequence[str],
    out_dir: Path,
    cache_dir: Path,
    workers: int,
    progress: ProgressFn | None = None,
    repository: str | None = None,
    counts: BuildCounts | None = None,
    host_lock: str = "",
) -> tuple[Path, BundleManifest]:
    """Export the suite at `sha`, compile every case x supported target, write the bundle.

    The bundle directory is `out_dir/<sha12>-<suite digest12>-<targets+compiler hash>`; when it
    already exists (complete, since it only ever appears by rename) it is returned as is. A case
    that fails to compile becomes a `failed` entry with the compiler's error. `workers=0` means one
    compile process per core. `counts`, when given, is filled with what was compiled / cached.
    The compiles hold `host_lock` shared (`pipeline.host_lock`): they wait while a CPU device on this
    host is timed, and hold off its timing while they run.

    Compiles run in *spawned* processes (safe beside runtime threads), so a script calling this
    needs the usual `if __name__ == "__main__":` guard.
    """
    counts = counts if counts is not None else BuildCounts()
    parsed = [Target.parse(t) for t in dict.fromkeys(targets)]
    target_names = sorted(str(t) for t in parsed)
    out_dir, cache_dir = Path(out_dir), Path(cache_dir)
    digest = suite_digest(location, sha)
    versions = _compiler_versions()
    final = out_dir / _bundle_name(sha, digest, target_names, versions)
    if (final / MANIFEST).is_file():
        counts.reused_bundle = True
        if progress:
            progress(f"reused bundle {final.name}", 1, 1)
        return final, load_bundle(final)

    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    try:
        export_suite(location, sha, tmp / SUITE_DIR)
        cases = load_suite(tmp / SUITE_DIR, digest=digest)
        suite_dir = (tmp / SUITE_DIR).resolve()
        jobs = _plan(cases, [Target.parse(t) for t in target_names], versions, suite_dir)
        with compiling(host_lock, on_wait=lambda message: _report_wait(message, progress)):
            results = _compile_all(jobs, cache_dir, suite_dir, workers, progress, counts)
        entries = []
        for i, job in enumerate(jobs):
            outcome = results[i]
            if isinstance(outcome, str):
                counts.failed += 1
                entries.append(_entry(job, None, None, None, outcome))
            elif outcome is _VENDOR:
                entries.append(_entry(job, None, None, {}, None))
            else:
                artifact = _store_artifact(tmp, outcome, _artifact_suffix(job.compiled, job.target))
                entries.append(_entry(job, artifact, outcome.stats, outcome.launch, None, outcome.code))
        manifest = BundleManifest(
            repository=repository or location.repository, commit=sha, suite_path=location.subdir,
            suite_digest=digest, suite_source=SUITE_DIR, created_at=datetime.now(timezone.utc),
            compilers=versions, targets=target_names, entries=entries,
        )
        (tmp / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / MANIFEST).is_file():
                raise
            # another builder finished the same bundle first: theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
            return final, load_bundle(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, manifest
