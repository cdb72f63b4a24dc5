"""md_escape: names render as exactly their text, through a real CommonMark parser with GFM tables."""

from __future__ import annotations

import html
import random
import re

import pytest
from markdown_it import MarkdownIt

from pipeline.pr_comments.markdown import Md, md_escape, md_link, md_url, truncate_lines

NASTY = [
    "gemm/a|b/c",
    "*bold* _em_ __strong__ ~~gone~~",
    "`code` ``double``",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](y) ![img](http://evil/x.png) [ref][1]",
    "\\|\\*\\` trailing backslash \\",
    "&amp; &lt;b&gt; &#124; &copy",
    "# heading > quote - item + item 1. list",
    "https://evil.example/x www.evil.example",
    "<https://autolink.example>",
    "{{ jinja }} {% raw %}",
    "ünïcødé/日本語/emoji 🚀",
    "a\nb\r\nc",
    "@someone and @org/team",
    "<!-- benchfarm:pr-comment -->",
    "| --- | --- |",
]

_md = MarkdownIt("commonmark").enable("table").enable("strikethrough")


def _cell_html(text: str) -> str:
    """The HTML of `text` rendered as the first cell of a GFM table."""
    rendered = _md.render(f"| head | other |\n|---|---|\n| {md_escape(text)} | after |\n")
    match = re.search(r"<tbody>\s*<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*</tr>", rendered, re.S)
    assert match, rendered
    assert match.group(2) == "after", f"the cell spilled into the next one: {rendered}"
    return match.group(1)


def _expected(text: str) -> str:
    return re.sub(r"[\r\n]+", " ", text).replace("@", "@\u200b").strip()


@pytest.mark.parametrize("text", NASTY)
def test_renders_as_plain_text_in_a_table_cell(text: str) -> None:
    cell = _cell_html(text)
    assert "<" not in cell.replace("&lt;", ""), f"markup leaked: {cell}"   # no tag at all: no em, code, a, img, script
    assert html.unescape(cell) == _expected(text)


@pytest.mark.parametrize("text", NASTY)
def test_renders_as_plain_text_in_a_paragraph_and_at_line_start(text: str) -> None:
    rendered = _md.render(f"{md_escape(text)}\n")
    assert rendered.startswith("<p>") and rendered.count("<") == 2, rendered  # one paragraph, nothing else
    assert html.unescape(rendered[3:-5]) == _expected(text)


def test_random_punctuation_round_trips() -> None:
    rng = random.Random(6)
    alphabet = "\\`*_{}[]()#+-.!|~<>&@:;'\"/= x1\t"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24)))
        cell = _cell_html(text)
        assert "<" not in cell.replace("&lt;", ""), (text, cell)
        # A table cell drops surrounding whitespace; everything else must survive.
        assert html.unescape(cell) == _expected(text).strip(" \t"), (text, cell)


def test_md_passes_through_and_escape_is_idempotent_on_md() -> None:
    once = md_escape("a*b")
    assert md_escape(once) == once == "a\\*b"
    assert md_escape(Md("**kept**")) == "**kept**"


def test_links_keep_text_as_text_and_urls_encoded() -> None:
    url = md_url("http://bf.example:8080/", "series/12")
    assert url == "http://bf.example:8080/series/12"
    query = md_url("http://bf.example", "compare", {"repository": "o/r", "head": "a b)", "base": None})
    assert query == "http://bf.example/compare?repository=o%2Fr&head=a+b%29"
    rendered = _md.render(md_link("[x](javascript:alert(1)) *", query))
    assert re.fullmatch(r'<p><a href="http://bf\.example/compare\?repository=o%2Fr&amp;head=a\+b%29">'
                        r"\[x\]\(javascript:alert\(1\)\) \*</a></p>\n", rendered), rendered


def test_truncate_lines_cuts_at_a_line_and_keeps_the_tail() -> None:
    text = "\n".join(f"line {i}" for i in range(100))
    cut = truncate_lines(text, 50, "\n[more](x)")
    assert len(cut) <= 50 and cut.endswith("\n[more](x)") and cut.startswith("line 0\nline 1")
    assert truncate_lines("short", 50, "tail") == "short"
