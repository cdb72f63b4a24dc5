"""The formatters the terminal table, the PR comment and the pages share."""

from __future__ import annotations

from pipeline.pr_comments.report import compile_section
from pipeline.pr_comments.table import format_figure
from pipeline.store.compile_stats import CompileChangeOut, CompileComparisonOut, relative_change


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
