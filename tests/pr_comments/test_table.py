"""The formatters the terminal table, the PR comment and the pages share."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from pipeline.config import CompareSettings
from pipeline.pr_comments.comment import compile_section
from pipeline.pr_comments.table import (
    change_note,
    compile_table,
    format_change,
    format_figure,
    format_pvalue,
    format_seconds,
    format_threshold,
    row_change,
    row_status,
    terminal_table,
)
from pipeline.results.store import ingest
from pipeline.results.store.compare import ComparisonOut, compare, only_cases
from pipeline.results.store.compile_stats import CompileChangeOut, CompileComparisonOut, relative_change
from pipeline.results.store.db import open_store, session_scope
from tests.helpers import factories as f
from tests.helpers.stores import seed


def test_compile_figures_are_shown_as_counted() -> None:
    """The documents carry every compile figure as a float (the API's `number`); bytes, registers
    and spills are whole numbers and read as such."""
    assert [format_figure(v) for v in (4096.0, 71, 0.0, 1.25, None)] == ["4096", "71", "0", "1.25", "-"]
    change = CompileChangeOut(case_id="gemm/a/1x1x1/f16/triton", target="cuda:sm_90", metric="registers",
                              base=96, head=71, change=relative_change(71, 96))
    assert change.base == 96.0 and isinstance(change.base, float)
    compiled = CompileComparisonOut(head_sha="a" * 40, base_sha="b" * 40, base_source="given", compared=1,
                                    summary="1 case changed registers", changes=[change])
    section = compile_section(compiled, public_url="http://bf.example", repository="acme/kernels")
    assert r"| registers | 96 | 71 | \-26\.0% |" in section   # Markdown-escaped


# Case ids as long as the suite's (kernels/: up to 75 characters), one a status.
LONG_CASES = {
    "regressed": "attention/llama3.2-1b-prefill/B1-Sq2048-Skv2048-Hq32-Hkv8-D64/bf16/triton",
    "improved": "gather-scatter/qwen3-30b-a3b-moe-dispatch/64x512x2048/bf16/triton",
    "similar": "gemm/llama3-8b-q-proj-decode/1x4096x4096/f32/iree",
    "inconclusive": "conv/resnet50-conv1/32x229x229x3-7x7x3x64-s2/f16/iree",
    "no baseline": "gather-scatter/deepseek-v3-moe-dispatch/4096x32768x7168/bf16/gluon-tdm",
    "errored": "conv/mobilenetv2-stem/1x224x224x3-32x3x3-s2/bf16/triton",
}


@pytest.fixture(scope="module")
def long_comparison(tmp_path_factory: pytest.TempPathFactory) -> ComparisonOut:
    """A real comparison from a store: c1 against c0 on one CPU class, a row of each status."""
    engine = seed(open_store(f"sqlite:///{tmp_path_factory.mktemp('table') / 'store.db'}"))
    drift = [1 + 0.1 * math.sin(i) for i in range(12)]
    c = LONG_CASES
    with session_scope(engine) as s:
        ingest.ingest_manifest(s, manifest=f.manifest(f.sha(0), [f.built_entry(case) for case in c.values()]),
                               path="/bundles/long")
        f.run_and_upload(s, 0, [
            f.ok(c["regressed"], f.series_samples(1e-3)), f.ok(c["improved"], f.series_samples(2e-3)),
            f.ok(c["similar"], f.series_samples(1e-3, spread=0.02)), f.ok(c["inconclusive"], [1e-3 * d for d in drift]),
            f.ok(c["errored"], f.series_samples(1e-3))])
        f.run_and_upload(s, 1, [
            f.ok(c["regressed"], f.series_samples(1.3e-3)), f.ok(c["improved"], f.series_samples(1e-3)),
            f.ok(c["similar"], f.series_samples(1.001e-3, spread=0.02)),
            f.ok(c["inconclusive"], [1.03e-3 * d for d in drift]), f.ok(c["no baseline"], f.series_samples(5e-6)),
            f.failed(c["errored"], "wrong")])
        comparison = compare(s, repository=f.REPO, head_sha=f.sha(1), device_class=f.DEVICE_CLASS,
                             settings=CompareSettings(min_change=0.05, max_pvalue=0.01, min_samples=5, ancestor_walk=50))
    engine.dispose()
    assert {r.status: str(r.case_id) for r in comparison.rows} == LONG_CASES
    return comparison


def _printed(comparison: ComparisonOut, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(terminal_table(comparison))
    return console.export_text()


def test_at_80_columns_every_case_and_figure_is_readable(long_comparison: ComparisonOut) -> None:
    """`benchfarm compare` and `run` in an 80-column terminal (issue 34): the case column kept (it had
    shrunk to nothing), each case's id whole across its wrapped lines, and base, now, change and
    verdict uncut (they had been cut with '…')."""
    text = _printed(long_comparison, 80)
    lines = text.splitlines()
    assert "…" not in text, text
    assert max(len(line) for line in lines) <= 80, text
    for row in long_comparison.rows:
        family, name, shape, dtype, impl = str(row.case_id).split("/")
        assert all(part in text for part in (f"{family}/", f"{name}/", f"{shape}/", f"{dtype}/", impl)), (row.case_id,
                                                                                                          text)
        figures = [format_seconds(row.base_median), format_seconds(row.head_median), format_change(row.change)]
        assert all(figure == "-" or figure in text for figure in figures), (figures, text)
    undecided = next(r for r in long_comparison.rows if r.status == "inconclusive")
    assert f"({format_threshold(undecided.threshold)})" in text, text   # the band its interval did not fit
    assert "p-values left out at this width" in text, text
    # one row a case: each starts on a line of its own, its family first
    starts = [line for line in lines if any(line.startswith(c.split("/")[0] + "/") for c in LONG_CASES.values())]
    assert len(starts) == len(LONG_CASES), text


def test_a_wide_terminal_shows_each_case_on_one_line_with_its_interval_and_p(long_comparison: ComparisonOut) -> None:
    text = _printed(long_comparison, 200)
    for row in long_comparison.rows:
        line = next(line for line in text.splitlines() if str(row.case_id) in line)
        assert row_change(row) in line and format_pvalue(row.pvalue) in line and row_status(row) in line, line
    assert "left out" not in text and "…" not in text, text


def test_the_table_says_the_change_is_not_the_ratio_of_the_medians_beside_it(long_comparison: ComparisonOut) -> None:
    """Issue 34: "base 60.7 ms, now 61.3 ms, -1.5 %" read as a contradiction; a line under the table
    says where the change comes from, at any width; a table with no change has no such line."""
    said = change_note(paired=False)
    assert "timing rounds' levels" in said and "even in sign" in said
    assert "head/base ratio" in change_note(paired=True)
    for width in (80, 200):
        assert said in " ".join(_printed(long_comparison, width).split()), width
    unmeasured = only_cases(long_comparison, {r.case_id for r in long_comparison.rows if r.status == "no baseline"})
    assert "even in sign" not in " ".join(_printed(unmeasured, 80).split())


def test_the_compile_table_at_80_columns_keeps_case_ids_and_figures_whole() -> None:
    changes = [CompileChangeOut(case_id=LONG_CASES["regressed"], target="cuda:sm_90", metric="registers", base=96,
                                head=71, change=relative_change(71, 96)),
               CompileChangeOut(case_id=LONG_CASES["improved"], target="llvm-cpu:x86_64", metric="binary_bytes",
                                base=123456, head=234567, change=relative_change(234567, 123456))]
    compiled = CompileComparisonOut(head_sha="a" * 40, base_sha="b" * 40, base_source="given", compared=2,
                                    summary="2 cases changed", changes=changes)
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(compile_table(compiled))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80, text
    for change in changes:
        family, name, shape, dtype, impl = str(change.case_id).split("/")
        assert all(part in text for part in (f"{family}/", f"{name}/", f"{shape}/", f"{dtype}/", impl)), text
        assert all(figure in text for figure in (change.target, change.metric, f"{change.base:g}", f"{change.head:g}",
                                                 f"{change.change:+.1%}")), text


def test_a_changed_or_undecided_row_says_what_its_counters_did() -> None:
    from pipeline.results.store.counters import CountersOut, counter_changes, counters_summary
    from tests.pr_comments.factories import row

    changes = counter_changes({"instructions": 100.0, "dram_read_bytes": 1000.0},
                              {"instructions": 100.0, "dram_read_bytes": 1180.0})
    counters = CountersOut(changes=changes, summary=counters_summary(changes))
    assert row_status(row("gemm/a/1x1x1/bf16/triton", "regressed", 0.12, counters=counters)) == \
        "regressed; DRAM bytes +18 %, instructions +0 %"
    assert row_status(row("gemm/a/1x1x1/bf16/triton", "inconclusive", 0.01, threshold=0.02, counters=counters)) == \
        "inconclusive (±2 %); DRAM bytes +18 %, instructions +0 %"
    # a similar row, and a row whose head has no counters, read as before
    assert row_status(row("gemm/a/1x1x1/bf16/triton", "similar", 0.0, counters=counters)) == "similar"
    none = CountersOut(changes=[], summary="no counters: not available: ncu (Nsight Compute) not found")
    assert row_status(row("gemm/a/1x1x1/bf16/triton", "regressed", 0.12, counters=none)) == "regressed"
