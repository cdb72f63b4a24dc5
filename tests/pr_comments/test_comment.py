"""The PR comment: sections, links, escaping, top-N and GitHub's size limit."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from pipeline.config import load_settings
from pipeline.contracts.ids import CaseId
from pipeline.pr_comments.comment import MARKER, CommentSettings, comment_marker, render_comment
from pipeline.pr_comments.report import conclusion_for, make_report
from pipeline.results.store.compile_stats import CompileChangeOut, CompileComparisonOut, relative_change
from tests.pr_comments.factories import BASE, HEAD, comparison, row

SETTINGS = CommentSettings(public_url="http://bf.example:8080", top_n=20)
_md = MarkdownIt("commonmark").enable("table")


def _rows(body: str) -> list[list[str]]:
    """The body's table rows as GitHub shows them: each cell's text, non-breaking spaces and hyphens as
    plain ones."""
    html_ = _md.render(body)
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).replace("\u00a0", " ").replace("\u2011", "-")
             for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.DOTALL)]
            for tr in re.findall(r"<tr>(.*?)</tr>", html_, re.DOTALL) if "<td" in tr]


def _id(name: str, family: str = "gemm") -> str:
    return f"{family}/{name}/1x1x1/bf16/triton"


def _verdict() -> list:
    h100 = comparison("nvidia-h100-sxm", [
        row(_id("slow"), "regressed", 0.12), row(_id("slower"), "regressed", 0.30),
        row(_id("fast"), "improved", -0.2), row(_id("same"), "similar", 0.001, pvalue=0.6),
        row(_id("new"), "no baseline", None, base=None, pvalue=None), row(_id("broken"), "errored", None, pvalue=None),
    ])
    pixel = comparison("pixel-8-pro-gpu", [row(_id("fast", "conv"), "improved", -0.1)])
    return [h100, pixel]


def test_sections_summary_and_links() -> None:
    body = render_comment(_verdict(), settings=SETTINGS, pr=7,
                          series_ids={(CaseId.parse(_id("slow")), "nvidia-h100-sxm"): 12})
    assert body.splitlines()[0] == comment_marker("acme/kernels", 7) and MARKER[:-4] in body
    assert "### benchfarm: regressed: 2 regressed, 1 errored, 2 improved, 1 no baseline, 1 similar\n" in body
    assert f"`{HEAD[:10]}` compared with `{BASE[:10]}` on 2 device classes" in body
    assert "#### Regressed (2)" in body and "#### Improved (2)" in body
    assert "<details>\n<summary>Other cases (3)</summary>" in body
    regressed = body.split("#### Regressed")[1].split("#### Improved")[0]
    assert regressed.index(_id("slower")) < regressed.index(_id("slow") + " |"), "the worst regression first"
    assert ["+30.0 %", "0.0001"] == [r for r in _rows(regressed) if r[0] == _id("slower")][0][4:6]
    assert "[history](http://bf.example:8080/series/12)" in regressed
    assert ("[compare](http://bf.example:8080/compare?repository=acme%2Fkernels&head=" + HEAD + "&base=" + BASE
            + "&device_class=nvidia-h100-sxm)") in regressed
    folded = body.split("<details>")[1]
    assert folded.index("errored") < folded.index("no baseline") < folded.index("similar")
    html = _md.render(body)
    assert html.count("<table>") == 3 and "<script" not in html


def test_nasty_names_render_as_text() -> None:
    # parts no contract accepts (a row written around it): the comment still shows them as text
    nasty = CaseId.model_construct(family="gemm", name="a|b", shape="*x*", dtype="_y_",
                                   impl="`z`/<script>alert(1)</script>/[x](http://evil)")
    c = comparison("dc|<b>", [row(nasty, "regressed", 0.5)], repository="ev_il/re*po")
    body = render_comment([c], settings=SETTINGS, pr=1)
    html = _md.render(body)
    assert "<script" not in html and "<b>" not in html and 'href="http://evil"' not in html
    assert "<em>" not in html and "<code>" not in html.split("</h3>")[1].split("<table>")[1]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", html)
    assert cells[0] == "gemm/a|b/*x*/_y_/`z`/&lt;script&gt;alert(1)&lt;/script&gt;/[x](http://evil)"
    assert "on dc|&lt;b&gt; (" in html   # one device class: named in the summary, no column for it
    assert "ev_il/re*po" in html


def test_optional_drift_and_note_on_rows() -> None:
    drifting = row(_id("d"), "regressed", 0.1, head_median=1.1e-3, drift=True, note="control moved *too*")
    body = render_comment([comparison("h100", [drifting, row(_id("plain"), "regressed", 0.2)])], settings=SETTINGS)
    assert _id("d") + " (probable device drift; control moved \\*too\\*) |" in body
    assert _id("plain") + " |" in body


def test_top_n_links_to_the_full_comparison() -> None:
    rows = [row(f"gemm/r{i:03d}/1x1x1/bf16/triton", "regressed", 0.1 + i / 1000) for i in range(30)]
    body = render_comment([comparison("h100", rows)], settings=CommentSettings("http://bf.example", top_n=5))
    regressed = body.split("#### Regressed (30)")[1]
    assert len(re.findall(r"^\| gemm/r", regressed, re.M)) == 5
    assert f"… and 25 more: [full comparison](http://bf.example/compare?repository=acme%2Fkernels&head={HEAD})" in body


def test_long_comment_fits_githubs_limit_with_a_link() -> None:
    rows = [row(f"gemm/{'very-long-name-' * 8}{i:05d}/1x1x1/bf16/triton", status, 0.1)
            for i in range(3000) for status in ("regressed", "improved", "similar")[i % 3:i % 3 + 1]]
    body = render_comment([comparison("h100", rows)], settings=CommentSettings("http://bf.example", top_n=1000))
    assert len(body) <= 65536
    assert body.startswith(comment_marker("acme/kernels", None))
    assert "**Truncated** to fit GitHub's comment size; see the [full comparison](http://bf.example/compare?" in body
    assert body.count("| gemm/") >= 100, "truncation keeps as many rows as fit"
    small = render_comment([comparison("h100", rows[:30])],
                           settings=CommentSettings("http://bf.example", top_n=1000, max_chars=4000))
    assert len(small) <= 4000 and "**Truncated**" in small


def test_the_compile_section_sits_above_the_footer_within_githubs_limit() -> None:
    """The compile changes are part of the one rendered body (`_compile.md.j2`): above the footer, and
    counted when rows are dropped to fit (spliced in after the fit, 12 of them took a 3,500-character
    comment to 4,459)."""
    changes = [CompileChangeOut(case_id=_id(f"k{i}"), target="cuda:sm_90", metric="registers", base=96 + i, head=71,
                                change=relative_change(71, 96 + i)) for i in range(12)]
    compiled = CompileComparisonOut(head_sha=HEAD, base_sha=BASE, base_source="given", compared=12,
                                    summary="12 cases changed registers", changes=changes)
    rows = [row(_id(f"r{i:02d}"), "regressed", 0.1 + i / 100) for i in range(30)]
    for limit in (65536, 3500):
        body = render_comment([comparison("h100", rows)], settings=CommentSettings("http://bf.example", max_chars=limit),
                              pr=1, compiled=compiled)
        assert len(body) <= limit, (limit, len(body))
        assert "**Compile:** 12 cases changed registers (not part of the verdict)" in body
        compile_part = body.split("**Compile:**")[1]
        assert compile_part.count("| registers |") == 10 and "2 more: [all compile changes](" in compile_part
        assert compile_part.rstrip().endswith("</sub>") and "<sub>" not in body.split("**Compile:**")[0]
    assert body.count("| gemm/r") < 30 and "**Truncated**" in body   # rows went to make room


def test_the_check_follows_the_verdict_and_errors() -> None:
    assert conclusion_for("regressed", 0, "fail") == "failure"
    assert conclusion_for("similar", 1, "fail") == "failure"  # an errored case fails the check
    assert conclusion_for("regressed", 0, "neutral") == "neutral"
    assert conclusion_for("similar", 0, "fail") == "success"
    assert conclusion_for("improved", 0, "fail") == "success"
    assert conclusion_for("no baseline", 0, "fail") == "neutral"
    assert conclusion_for("insufficient data", 0, "fail") == "neutral"


def test_controls_drift_and_unchanged_rows_do_not_count() -> None:
    control = row("gemm/x/1x1x1/bf16/vendor", "regressed", 0.2, pvalue=1e-5, model="vendor", head_median=1.2e-3,
                  is_control=True)
    drifting = row("gemm/x/1x1x1/bf16/triton", "regressed", 0.2, pvalue=1e-5, head_median=1.2e-3,
                   ci_low=0.18, ci_high=0.22, drift=True)
    same = row("gemm/y/1x1x1/bf16/triton", "unchanged", 0.3, pvalue=1e-5, head_median=1.3e-3,
               ci_low=0.25, ci_high=0.35, same_binary=True)
    report = make_report([comparison("h100", [control, drifting, same])], settings=load_settings(), pr=1)
    assert report.conclusion == "success"
    assert report.title == "similar: 1 unchanged (same binary), 1 device drift; 1 control on 1 device class"
    assert "#### Regressed" not in report.body and "<summary>Other cases (3)</summary>" in report.body
    assert ["gemm/y/1x1x1/bf16/triton", "1 ms", "1.3 ms", "+30.0 % [+25.0, +35.0]", "1e-05", "unchanged (same binary)"] \
        in [r[:6] for r in _rows(report.body)]
    assert "gemm/x/1x1x1/bf16/vendor (vendor control) |" in report.body
    assert "regressed (device drift)" in [r[5] for r in _rows(report.body)]


def test_make_report_uses_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(public_url="https://bench.example", github={"verdict_policy": "neutral", "comment_top_n": 1})
    report = make_report(_verdict(), settings=settings, pr=7)
    assert report.conclusion == "neutral" and report.title.startswith("regressed: 2 regressed, 1 errored, 2 improved")
    assert report.details_url == f"https://bench.example/compare?repository=acme%2Fkernels&head={HEAD}"
    assert "… and 1 more" in report.body and report.marker in report.body
    assert report.from_json(report.to_json()) == report


def test_no_comparisons_is_an_error() -> None:
    with pytest.raises(ValueError):
        render_comment([], settings=SETTINGS)


def test_rows_of_the_bases_code_are_told_apart_from_its_binaries() -> None:
    """Issue 32: a renamed kernel (the same code, not timed) is unchanged too, and says which."""
    same = row("gemm/y/1x1x1/bf16/triton", "unchanged", None, pvalue=None, same_binary=True)
    renamed = [row(f"gemm/z{i}/1x1x1/bf16/triton", "unchanged", None, pvalue=None, same_code=True) for i in range(2)]
    report = make_report([comparison("h100", [same, *renamed])], settings=load_settings(), pr=1)
    assert report.conclusion == "success"
    assert report.title == "similar: 1 unchanged (same binary), 2 unchanged (same code) on 1 device class"
    assert ["gemm/z0/1x1x1/bf16/triton", "1 ms", "-", "-", "-", "unchanged (same code)"] \
        in [r[:6] for r in _rows(report.body)]
