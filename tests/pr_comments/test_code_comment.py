"""The PR comment's code column and folded listing diffs (issue 32), and its layout at GitHub's width
(issue 34): a golden file, and the body rendered by a CommonMark parser with GitHub's tables.
BENCHFARM_UPDATE_GOLDEN=1 rewrites the golden file (then read its diff before committing it)."""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from markdown_it import MarkdownIt

from pipeline.pr_comments.comment import CodeDiff, CommentSettings, render_comment
from pipeline.pr_comments.markdown import md_escape
from pipeline.results.store.code import CodeChangeOut
from tests.pr_comments.factories import comparison, row

GOLDEN = Path(__file__).parent / "golden" / "code_comment.md"
SETTINGS = CommentSettings(public_url="http://bf.example:8080", top_n=20)
_md = MarkdownIt("commonmark").enable("table")   # html on, as GitHub's (sanitized there)

SLOW = "gemm/llama3-8b-mlp-up/4096x14336x4096/bf16/triton"
RENAMED = "gemm/llama3-8b-mlp-down/4096x4096x14336/bf16/triton"
PTX = "gemm/llama3-8b-mlp-up/4096x14336x4096/f16/iree"
NO_PTX = ("no disassembler in this builder for IREE cuda executables (PTX: the driver compiles it for the GPU it "
          "runs on)")


def _change(state: str, summary: str, **fields: object) -> CodeChangeOut:
    values: dict[str, object] = {"state": state, "summary": summary, "head_digest": "1" * 64, "base_digest": "2" * 64,
                                     "head_instructions": 764, "base_instructions": 752, "classes": {}, "opcodes": {},
                                     "registers": (208, 224), "spills": (0, 0), "shared_bytes": (None, None), "unavailable": None,
                                     "diff": state == "changed"}
    return CodeChangeOut.model_validate(values | fields)


def _verdict() -> list:
    rows = [
        row(SLOW, "regressed", 0.0344, base=3.325e-3, pvalue=2.6e-10, ci_low=0.031, ci_high=0.038,
            code=_change("changed", "+12 instr: +4 HGMMA, -8 LDG, +16 IMAD; regs 208 → 224; spills 0",
                         opcodes={"IMAD": 16, "LDG": -8, "HGMMA": 4})),
        row(RENAMED, "unchanged", 0.004, base=1.2e-3, pvalue=0.4, same_code=True, paired=True,
            code=_change("same code", "same code", head_digest="3" * 64, base_digest="3" * 64)),
        row(PTX, "similar", 0.001, base=2.1e-3, pvalue=0.7, target="cuda:sm_80",
            code=_change("not disassembled", f"not disassembled: {NO_PTX}", head_digest=None, base_digest=None,
                         unavailable=NO_PTX)),
    ]
    return [comparison("nvidia-h100-sxm", rows)]


DIFF = CodeDiff(SLOW, "cuda:sm_90", "+12 instr: +4 HGMMA, -8 LDG, +16 IMAD; regs 208 → 224; spills 0", [
    "--- base", "+++ head", "@@ -40,4 +40,5 @@", " LDC R1, c[0x0][0x28]", "-LDG.E.128 R4, desc[UR6][R2.64]",
    "+LDGSTS.E.BYPASS.128 [R5], desc[UR6][R2.64]", "+HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24, gsb0", " EXIT",
], left_out=37)


def test_the_comment_with_code_matches_its_golden_file() -> None:
    body = render_comment(_verdict(), settings=SETTINGS, code_diffs=[DIFF])
    if os.environ.get("BENCHFARM_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(body)
    assert body == GOLDEN.read_text()


def test_the_code_column_and_the_folded_diff_render_on_github() -> None:
    rendered = _md.render(render_comment(_verdict(), settings=SETTINGS, code_diffs=[DIFF]))
    headers = re.findall(r"<th[^>]*>(.*?)</th>", rendered)
    # a commit, not a pull request: "head"; one device class: no column for it
    assert "head" in headers and "PR" not in headers and "device class" not in headers and "code" in headers
    cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", rendered)]
    assert "+12\u00a0instr: +4\u00a0HGMMA, -8\u00a0LDG, +16\u00a0IMAD; regs\u00a0208\u00a0→\u00a0224; spills\u00a00" in cells
    assert "2.6e\u201110" in cells and "3.44\u00a0ms" in cells   # figures that do not break
    assert "same code" in cells and any(c.startswith("not disassembled: no disassembler") for c in cells)
    # one folded diff, its title as text, its lines in a diff block
    blocks = re.findall(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", rendered, re.DOTALL)
    diff = [(title, inner) for title, inner in blocks if "on cuda:sm_90" in title]
    assert len(diff) == 1 and html.unescape(diff[0][0]).startswith(f"{SLOW} on cuda:sm_90: +12 instr")
    code = re.search(r'<pre><code class="language-diff">(.*?)</code></pre>', diff[0][1], re.DOTALL)
    assert code is not None and html.unescape(code.group(1)).splitlines()[4] == "-LDG.E.128 R4, desc[UR6][R2.64]"
    assert "37 more lines of this diff left out" in diff[0][1]
    # the headline says the verdict once: no bullet repeats it for the one device class
    assert rendered.count("1 regressed") == 1 and "<li>" not in rendered


def test_a_pull_request_says_pr_and_several_device_classes_get_their_column_and_bullets() -> None:
    two = [*_verdict(), comparison("pixel-8-pro-gpu", [row(PTX, "similar", 0.0, target="vulkan:adreno")])]
    rendered = _md.render(render_comment(two, settings=SETTINGS, pr=7))
    headers = re.findall(r"<th[^>]*>(.*?)</th>", rendered)
    assert "PR" in headers and "device class" in headers and rendered.count("<li>") == 2


def test_diffs_go_first_when_the_comment_is_too_long() -> None:
    lines = ["--- base", "+++ head", "@@ -1,40 +1,40 @@", *(f"-IMAD R{i}, R{i}, R{i + 1}, RZ" for i in range(40))]
    diffs = [CodeDiff(f"gemm/k{i:02d}/1x1x1/bf16/triton", "cuda:sm_90", "+1 instr", lines) for i in range(10)]
    full = render_comment(_verdict(), settings=SETTINGS, code_diffs=diffs)
    assert full.count("```diff") == 10 and "**Truncated**" not in full
    limit = len(full) - 3000
    cut = render_comment(_verdict(), settings=CommentSettings(SETTINGS.public_url, max_chars=limit), code_diffs=diffs)
    assert len(cut) <= limit and 0 < cut.count("```diff") < 10 and "**Truncated**" in cut
    assert f"… and {10 - cut.count('```diff')} more changed kernels" in cut
    assert all(md_escape(case) in cut for case in (SLOW, RENAMED, PTX)), "every row kept: the diffs made room"
    shown = render_comment(_verdict(), settings=CommentSettings(SETTINGS.public_url, max_diffs=2), code_diffs=diffs)
    assert shown.count("```diff") == 2 and "… and 8 more changed kernels" in shown


def test_a_listing_cannot_close_its_fence_or_open_html() -> None:
    nasty = CodeDiff("gemm/a/1x1x1/bf16/triton", "cuda:sm_90", "+1 instr <b>x</b>",
                     ["+```", "+</details><script>x</script>", "+````` five"])
    rendered = _md.render(render_comment(_verdict(), settings=SETTINGS, code_diffs=[nasty]))
    assert "<script>" not in rendered and "<b>x</b>" not in rendered
    code = re.search(r'<pre><code class="language-diff">(.*?)</code></pre>', rendered, re.DOTALL)
    assert code is not None and html.unescape(code.group(1)).splitlines() == nasty.lines
