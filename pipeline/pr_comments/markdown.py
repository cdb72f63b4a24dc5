"""Markdown for GitHub comments: text that stays text, links that stay links.

Everything a template prints is escaped by `md_escape` unless it is an `Md` (markdown made here,
from escaped parts): a case, device class or repository name is data, and a name like
``gemm/a|b/*x*/`<script>`/[x](y)`` must render as those characters, not as a table cell break,
emphasis, code, HTML or a link.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote, urlencode

__all__ = ["Md", "html_text", "keep_figures", "md_escape", "md_figures", "md_link", "md_unbroken", "md_url",
           "truncate_lines"]

# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones with meaning in
# GitHub's Markdown (emphasis, code, links, images, tables, headings, lists, quotes, strikethrough,
# autolinks). `&`, `<`, `>` become entities, so no HTML tag or entity survives.
_BACKSLASHED = set("\\`*_{}[]()#+-.!|~:")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_ZERO_WIDTH_SPACE = "\u200b"
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


class Md(str):
    """A string that is already Markdown; templates print it as it is."""


def md_escape(text: object) -> Md:
    """`text` as Markdown that renders as exactly that text, on one line, in a table cell too.

    Line breaks become spaces (a table row is one line), control characters are dropped, `@`
    gets a zero-width space after it (no one is mentioned by a case name); escaping `:` and `.`
    keeps `https://…` and `www.…` from becoming autolinks. An `Md` passes through unchanged.
    """
    if isinstance(text, Md):
        return text
    value = _CONTROL.sub("", _LINE_BREAKS.sub(" ", str(text)))
    out = []
    for ch in value:
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in _BACKSLASHED:
            out.append("\\" + ch)
        elif ch == "@":
            out.append("@" + _ZERO_WIDTH_SPACE)
        else:
            out.append(ch)
    return Md("".join(out))


_INNER_SPACE = re.compile(r"(?<![,;:]) (?=[\d+\-±→])|(?<=[\d%→]) ")
_EXPONENT_MINUS = re.compile(r"(?<=\de)-(?=\d)")


def keep_figures(text: object) -> str:
    """`text` (figures: "3.44 ms", "+3.1 % [+2.4, +3.8]", "2.6e-10", "regs 208 → 224") with its
    figures made unbreakable for a narrow column (the PR comment's, a page's): a space inside a
    figure (after a number, or before one, unless after a `,`, `;` or `:`: the breaks between
    figures) non-breaking, an exponent's minus a non-breaking hyphen (browsers break "2.6e-10"
    after its "-"); words still wrap."""
    return _EXPONENT_MINUS.sub("\u2011", _INNER_SPACE.sub("\u00a0", str(text)))


def md_figures(text: object) -> Md:
    """`keep_figures` as Markdown: escaped, the unbreakable characters written as entities (readable
    in the comment's source)."""
    return Md(md_escape(keep_figures(text)).replace("\u00a0", "&nbsp;").replace("\u2011", "&#8209;"))


def md_unbroken(text: object) -> Md:
    """A short name (a device class: `nvidia-h100-sxm`) as Markdown a narrow column does not wrap at
    its hyphens or spaces: escaped, with a non-breaking hyphen and space."""
    return Md(md_escape(str(text).replace(" ", "\u00a0").replace("-", "\u2011"))
              .replace("\u00a0", "&nbsp;").replace("\u2011", "&#8209;"))


def html_text(text: object) -> Md:
    """`text` for an HTML block of a comment (a `<summary>`): entities for `&<>"`, no Markdown
    escapes (an HTML block shows backslashes as they are), `@` kept from mentioning anyone."""
    value = _CONTROL.sub("", _LINE_BREAKS.sub(" ", str(text)))
    return Md(html.escape(value).replace("@", "@" + _ZERO_WIDTH_SPACE))


def md_url(base: str, path: str = "", query: dict[str, str | int | None] | None = None) -> str:
    """An absolute URL safe inside `[text](url)`: path segments and query values percent-encoded,
    parentheses, spaces and angle brackets in `base` too."""
    url = base.rstrip("/") + "/" + "/".join(quote(part, safe="") for part in path.strip("/").split("/") if part)
    if query:
        url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
    return quote(url, safe=":/?&=%#+,;@!$'*~-._")


def md_link(text: object, url: str) -> Md:
    """`[text](url)` with the text escaped; `url` should come from `md_url`."""
    return Md(f"[{md_escape(text)}]({quote(url, safe=':/?&=%#+,;@!$*~-._')})")


def truncate_lines(text: str, limit: int, tail: str) -> str:
    """`text` cut at a line boundary so that it plus `tail` fits in `limit` characters."""
    if len(text) <= limit:
        return text
    room = max(0, limit - len(tail))
    cut = text.rfind("\n", 0, room)
    return text[: cut if cut > 0 else room].rstrip() + tail
