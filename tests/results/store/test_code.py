"""Code-path evidence in the store and the comparison (issue 32), with the real compilers: an IREE
llvm-cpu GEMM built at a base, at a commit renaming its function, and at a commit changing its tile;
the bundles ingested with their listings, results stored for each commit, then compared."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.build.bundle import BuildCounts, build_bundle
from pipeline.build.iree_compiler import compile_iree
from pipeline.build.suite_api import IreeSource
from pipeline.build.suite_loader import commit_history, locate_suite, resolve_commit
from pipeline.config import CompareSettings, load_settings
from pipeline.contracts import BundleManifest, CaseResult, DeviceClass, Target
from pipeline.contracts.result import PairedBase
from pipeline.pr_comments.markdown import md_figures
from pipeline.pr_comments.report import report_for_commit
from pipeline.results.store import code, ingest
from pipeline.results.store.compare import compare
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import Bundle, CodeListing, CompileStat
from tests.build.test_bundle import gemm_mlir
from tests.helpers import factories as f
from tests.helpers.suite_repo import (
    GemmCase,
    commit_all,
    gemm_suite_files,
    make_suite_repo,
    write_files,
)

SETTINGS = CompareSettings()
CASE = GemmCase("a", tile=(2, 4))


@dataclass(frozen=True)
class Built:
    sha: str
    bundle_dir: Path
    manifest: BundleManifest


@dataclass(frozen=True)
class Builds:
    location_root: Path
    base: Built
    renamed: Built
    tiled: Built


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    tmp = tmp_path_factory.mktemp("code")
    repo = make_suite_repo(tmp, gemm_suite_files([CASE]))
    location = locate_suite(repo / "kernels")

    def build(sha: str) -> Built:
        counts = BuildCounts()
        bundle_dir, manifest = build_bundle(location=location, sha=sha, targets=[f.TARGET], out_dir=tmp / "bundles",
                                            cache_dir=tmp / "cache", workers=2, counts=counts, repository=f.REPO)
        assert counts.failed == 0
        return Built(sha, Path(bundle_dir), manifest)

    base = build(resolve_commit(location))
    text = (repo / "kernels/__init__.py").read_text()
    write_files(repo, {"kernels/__init__.py": text.replace("func.func @mm(", "func.func @renamed_mm(")
                       .replace('entry_point="mm"', 'entry_point="renamed_mm"')})
    renamed = build(commit_all(repo, "rename the function"))
    write_files(repo, gemm_suite_files([GemmCase("a", tile=(4, 4))]))
    tiled = build(commit_all(repo, "a bigger register tile"))
    return Builds(repo, base, renamed, tiled)


def _store(engine: Engine, builds: Builds) -> None:
    location = locate_suite(builds.location_root / "kernels")
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=f.REPO, commits=commit_history(location, builds.tiled.sha))
        ingest.upsert_device_class(s, f.device_class())
        for built in (builds.base, builds.renamed, builds.tiled):
            ingest.ingest_manifest(s, manifest=built.manifest, path=str(built.bundle_dir), bundle_dir=built.bundle_dir)


def _upload(engine: Engine, built: Built, results: list[CaseResult]) -> None:
    with session_scope(engine) as s:
        run = ingest.create_run(s, repository=f.REPO, commit_sha=built.sha, kind="pr", device_classes=[f.DEVICE_CLASS])
        ingest.ingest_result(s, document=f.result_document(run_id=run.id, job_id=run.jobs[0].id, commit_sha=built.sha,
                                                          results=results), analysis=None)
        ingest.set_job_status(s, job_id=run.jobs[0].id, status="done")


def _timed(built: Built, level: float, base: Built | None = None, base_level: float = 1e-3) -> CaseResult:
    """An ok result of the build's one entry, the digests the agent sends (paired with `base`'s entry)."""
    entry = built.manifest.entries[0]
    samples = [level * (1 + 0.002 * ((i * 7) % 5)) for i in range(20)]
    result = f.ok(entry.case, samples, rounds=[4] * 5)
    paired = None
    if base is not None:
        other = base.manifest.entries[0]
        paired = PairedBase(commit=base.sha, samples=[base_level * (1 + 0.002 * ((i * 3) % 5)) for i in range(20)],
                            binary_digest=other.binary_digest(), code_digest=other.code_digest())
    return result.model_copy(update={"binary_digest": entry.binary_digest(), "code_digest": entry.code_digest(),
                                     "paired_base": paired})


def test_a_rename_is_the_same_code_and_a_tile_edit_shows_what_changed(engine: Engine, builds: Builds) -> None:
    _store(engine, builds)
    with session_scope(engine) as s:   # every entry's evidence and its listing, kept once per digest
        stats = s.execute(sa.select(CompileStat.code_tool, CompileStat.code_digest, CompileStat.instructions)).all()
        assert len(stats) == 3 and all(tool.startswith("llvm-objdump") and digest for tool, digest, _ in stats)
        assert stats[0][2]["total"] > 0 and set(stats[0][2]["by_class"]) >= {"mma", "global_load", "branch"}
        assert s.scalar(sa.select(sa.func.count()).select_from(CodeListing)) == 2   # the rename kept its listing
        listing = (builds.base.bundle_dir / builds.base.manifest.entries[0].code.listing).read_text()  # type: ignore[union-attr, operator]
        assert code.listings(s, [stats[0][1]]) == {stats[0][1]: listing}

    # the rename's drift sentinel was timed, paired, and came out 10 % slower: its code is the base's
    _upload(engine, builds.base, [_timed(builds.base, 1e-3)])
    _upload(engine, builds.renamed, [_timed(builds.renamed, 1.1e-3, base=builds.base)])
    _upload(engine, builds.tiled, [_timed(builds.tiled, 0.9e-3, base=builds.renamed, base_level=1.1e-3)])
    with session_scope(engine) as s:
        renamed = compare(s, repository=f.REPO, head_sha=builds.renamed.sha, device_class=f.DEVICE_CLASS,
                          settings=SETTINGS)
        tiled = compare(s, repository=f.REPO, head_sha=builds.tiled.sha, device_class=f.DEVICE_CLASS, settings=SETTINGS)
        report = report_for_commit(s, settings=load_settings(), repository=f.REPO, sha=builds.tiled.sha, pr=3)
    row = renamed.rows[0]
    assert row.paired and not row.same_binary and row.same_code and row.status == "unchanged"
    assert row.change is not None and row.change > 0.05   # timed, kept, never a change
    assert renamed.verdict == "similar"
    assert row.code is not None and row.code.state == "same code" and row.code.summary == "same code"

    row = tiled.rows[0]
    assert row.status == "improved" and not row.same_code
    change = row.code
    assert change is not None and change.state == "changed" and change.diff
    assert change.head_digest != change.base_digest and change.head_instructions != change.base_instructions
    assert change.opcodes and change.classes
    moved = change.head_instructions - change.base_instructions  # type: ignore[operator]
    first, delta = next(iter(change.opcodes.items()))
    assert change.summary.startswith(f"{moved:+d} instr: {delta:+d} {first}")

    # the comment: a code column and the listing's diff, folded
    assert f"| {md_figures(change.summary)} |" in report.body
    diff = report.body.split("#### Code: 1 kernel changed")[1]
    assert f"<summary>{row.case_id} on {f.TARGET}: " in diff and "```diff\n--- base\n+++ head\n@@ " in diff


def test_a_target_without_a_disassembler_is_labelled(engine: Engine) -> None:
    ptx = compile_iree(IreeSource(mlir=gemm_mlir(), entry_point="mm"), Target.parse("cuda:sm_80"))
    assert ptx.code is not None and ptx.code.unavailable
    entry = f.built_entry(f.GEMM, target="cuda:sm_80").model_copy(update={"code": ptx.code})
    device_class = DeviceClass(name="a100", kind="gpu", targets=["cuda:sm_80"], runtime="iree", hal_driver="cuda",
                               description="an A100")
    with session_scope(engine) as s:
        ingest.upsert_repository(s, name=f.REPO)
        ingest.record_commits(s, repository=f.REPO, commits=[f.commit(0), f.commit(1, 0, minutes=1)])
        ingest.upsert_device_class(s, device_class)
        for label in (0, 1):
            ingest.ingest_manifest(s, manifest=f.manifest(f.sha(label), [entry.model_copy(update={
                "artifact": entry.artifact.model_copy(update={"sha256": f"{label}" * 64})})]),  # type: ignore[union-attr]
                path="/nowhere")
            run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(label), kind="adhoc", device_classes=["a100"])
            samples = f.series_samples(1e-3, 12)
            result = f.ok(f.GEMM, samples, target="cuda:sm_80", binary=f"b{label}")
            ingest.ingest_result(s, document=f.result_document(
                run_id=run.id, job_id=run.jobs[0].id, commit_sha=f.sha(label), results=[result], device_class="a100"),
                analysis=None)
        row = compare(s, repository=f.REPO, head_sha=f.sha(1), device_class="a100", settings=SETTINGS,
                      base_sha=f.sha(0)).rows[0]
    assert row.code is not None and row.code.state == "not disassembled"
    assert row.code.summary == f"not disassembled: {ptx.code.unavailable}"


def test_a_listing_that_is_not_its_digest_is_refused_and_nothing_is_stored(engine: Engine, builds: Builds,
                                                                          tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "bundle"
    shutil.copytree(builds.base.bundle_dir, copy)
    listing = copy / builds.base.manifest.entries[0].code.listing  # type: ignore[union-attr, operator]
    listing.write_text(listing.read_text() + "nop\n")
    location = locate_suite(builds.location_root / "kernels")
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=f.REPO, commits=commit_history(location, builds.base.sha))
    with pytest.raises(ingest.IngestError, match="sha256 is not the manifest's code.digest"), session_scope(engine) as s:
        ingest.ingest_manifest(s, manifest=builds.base.manifest, path=str(copy), bundle_dir=copy)
    with session_scope(engine) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Bundle)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(CodeListing)) == 0


def test_opcodes_and_side_by_side_of_normalized_listings() -> None:
    base = "function:\n@P0 LDG.E R2, [R4.64] ;\nHGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;\nEXIT\n"
    head = "function:\n@P0 LDG.E R2, [R4.64] ;\nHGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;\n" \
           "HGMMA.64x128x16.F32 R56, gdesc[UR8], R56 ;\nEXIT\n"
    assert code.opcode_counts(base) == {"LDG": 1, "HGMMA": 1, "EXIT": 1}
    assert code.opcode_of(".LBB0_2:") is None and code.opcode_of("b.ne <+0x60>") == "b"
    assert code.opcode_of("%12 = OpLoad %3 %9") == "OpLoad" and code.opcode_of("OpStore %9 %12") == "OpStore"
    rows, left_out = code.side_by_side(base, head, context=1)
    assert left_out == 0 and [r.kind for r in rows] == ["equal", "insert", "equal"]
    assert rows[1].base_number is None and rows[1].head_number == 4 and rows[1].head.startswith("HGMMA")
    lines, cut = code.unified_diff(base, head, max_lines=4)
    assert lines[:3] == ["--- base", "+++ head", "@@ -1,4 +1,5 @@"] and cut == 4


def test_benchfarm_compare_shows_the_code_at_80_columns_and_in_json(builds: Builds, tmp_path: Path) -> None:
    """The CLI (a real subprocess) on a store holding the three builds: the comparison's table keeps its
    columns, the code goes in a table of its own under it, every line within 80 columns; JSON rows carry it."""
    import json

    from pipeline.results.store.db import open_store
    from tests.test_cli import benchfarm

    url = f"sqlite:///{tmp_path}/store.db"
    engine = open_store(url)
    _store(engine, builds)
    _upload(engine, builds.renamed, [_timed(builds.renamed, 1.1e-3)])
    _upload(engine, builds.tiled, [_timed(builds.tiled, 0.9e-3, base=builds.renamed, base_level=1.1e-3)])
    with session_scope(engine) as s:
        summary = compare(s, repository=f.REPO, head_sha=builds.tiled.sha, device_class=f.DEVICE_CLASS,
                          settings=SETTINGS).rows[0].code.summary  # type: ignore[union-attr]
    engine.dispose()
    args = ("compare", builds.renamed.sha, builds.tiled.sha, "--repository", f.REPO)
    shown = _in_a_terminal(tmp_path, 80, *args, BENCHFARM_DATABASE_URL=url)
    assert max(len(line) for line in shown.splitlines()) <= 80, shown
    assert "-18." in shown.split("code against the base")[0], shown   # the comparison's change, whole
    code_table = shown.split("code against the base")[1]
    assert " ".join(summary.split()) in " ".join(code_table.split()), shown
    rows = json.loads(benchfarm(tmp_path, *args, "--format", "json", BENCHFARM_DATABASE_URL=url).stdout)
    code_out = rows["comparisons"][0]["rows"][0]["code"]
    assert code_out["state"] == "changed" and code_out["summary"] == summary


def _in_a_terminal(cwd: Path, columns: int, *args: str, **env: str) -> str:
    """What `benchfarm ARGS` prints on a terminal (a pty) `columns` wide, styles taken out."""
    import fcntl
    import os
    import pty
    import re
    import struct
    import subprocess
    import sys
    import termios

    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BENCHFARM_") and k != "COLUMNS"}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd, stdin=terminal, stdout=terminal,
                            stderr=subprocess.PIPE, env={**clean, "BENCHFARM_HOME": str(cwd / ".benchfarm"), **env})
    os.close(terminal)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:   # EIO: the program closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", out.decode()).replace("\r\n", "\n")


def test_without_the_listings_the_summary_names_the_classes_and_there_is_no_diff(engine: Engine,
                                                                                 builds: Builds) -> None:
    """A bundle registered from its manifest alone (an external job: the service never sees its files)."""
    location = locate_suite(builds.location_root / "kernels")
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=f.REPO, commits=commit_history(location, builds.tiled.sha))
        ingest.upsert_device_class(s, f.device_class())
        for built in (builds.renamed, builds.tiled):
            ingest.ingest_manifest(s, manifest=built.manifest, path="external:run")
    _upload(engine, builds.renamed, [_timed(builds.renamed, 1.1e-3)])
    _upload(engine, builds.tiled, [_timed(builds.tiled, 0.9e-3, base=builds.renamed, base_level=1.1e-3)])
    with session_scope(engine) as s:
        change = compare(s, repository=f.REPO, head_sha=builds.tiled.sha, device_class=f.DEVICE_CLASS,
                         settings=SETTINGS).rows[0].code
        assert s.scalar(sa.select(sa.func.count()).select_from(CodeListing)) == 0
    assert change is not None and change.state == "changed" and not change.diff and change.opcodes == {}
    name, delta = next(iter(change.classes.items()))
    assert f"{delta:+d} {name.replace('_', ' ')}" in change.summary
