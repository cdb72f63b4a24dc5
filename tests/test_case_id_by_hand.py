"""Nothing outside the contracts parses or formats a case id by hand: `CaseId.parse` is the one
parser and `str(case_id)` the one formatter (pipeline/contracts/ids.py).

Found by reading the code (AST for Python, text for templates and scripts): every split, partition or
join on "/" and every f-string of five "/"-separated parts in `pipeline/`. The few that are not
case ids (paths, URLs, a GitHub repository's owner/name) are allowed below, each with its reason;
an allowed one that is gone must leave the list too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = ROOT / "pipeline"
THE_PARSER = PIPELINE / "contracts" / "ids.py"

ALLOWED: dict[tuple[str, str], str] = {
    ("pipeline/contracts/manifest.py", 'path.split("/")'):
        "a bundle-relative file path (an artifact, a code listing): its components are checked for '..'",
    ("pipeline/pr_comments/markdown.py", 'path.strip("/").split("/")'):
        "a URL path: each segment is quoted on its own",
    ("pipeline/pr_comments/markdown.py", '"/".join(quote(part, safe="") for part in path.strip("/").split("/") if part)'):
        "the same URL path, joined again once quoted",
    ("pipeline/pr_comments/github.py", 'repository.split("/", 1)'):
        "a GitHub repository's owner/name",
}

_SPLITTERS = {"split", "rsplit", "partition", "rpartition"}


def _is_slash(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == "/"


def _five_part_template(node: ast.JoinedStr) -> bool:
    """An f-string like f"{family}/{name}/{shape}/{dtype}/{impl}": five "/"-separated parts, at
    least four of them formatted values."""
    template = "".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)
    parts = template.split("/")
    return len(parts) == 5 and sum("\0" in p for p in parts) >= 4


def by_hand(source: str) -> list[tuple[int, str]]:
    """(line, source) of each "/" split, partition or join, and each five-part f-string, in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            sep = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "sep"), None)
            if node.func.attr in _SPLITTERS and _is_slash(sep) or node.func.attr == "join" and _is_slash(node.func.value):
                found.append((node.lineno, ast.get_source_segment(source, node) or ""))
        elif isinstance(node, ast.JoinedStr) and _five_part_template(node):
            found.append((node.lineno, ast.get_source_segment(source, node) or ""))
    return found


def test_the_detector_finds_what_it_looks_for() -> None:
    source = "\n".join([
        'family, name, *_ = case_id.split("/")',
        'parts = text.rsplit("/", 4)',
        'head, _, tail = text.partition(sep="/")',
        'text = "/".join(parts)',
        'text = f"{c.family}/{c.name}/{c.shape}/{c.dtype}/vendor"',
        'words = line.split(" ")',                               # not "/"
        'seed = f"{run_id}/{job_id}/{case}/{target}"',           # four parts
        'url = f"{base}/series/{sid}"',
    ])
    assert [line for line, _ in by_hand(source)] == [1, 2, 3, 4, 5]


def test_no_case_id_is_split_or_joined_by_hand_in_python() -> None:
    seen: set[tuple[str, str]] = set()
    offenders = []
    for path in sorted(PIPELINE.rglob("*.py")):
        if path == THE_PARSER:
            continue
        relative = path.relative_to(ROOT).as_posix()
        for line, segment in by_hand(path.read_text()):
            key = (relative, segment)
            if key in ALLOWED:
                seen.add(key)
            else:
                offenders.append(f"{relative}:{line}: {segment}")
    assert not offenders, ("a case id parsed or formatted by hand; use CaseId.parse / str(case_id) and the "
                           "CaseId's parts (or allow it here, with why it is no case id):\n" + "\n".join(offenders))
    assert not set(ALLOWED) - seen, f"allowed, and gone from the code: {sorted(set(ALLOWED) - seen)}"


_TEMPLATE_SPLIT = re.compile(r"""\.(?:r?split|r?partition)\(\s*['"]/['"]|['"]/['"]\s*\)?\s*\.join\(|join\(\s*['"]/['"]""")


def test_no_template_or_script_splits_a_case_id() -> None:
    files = [*PIPELINE.rglob("templates/*"), *(p for p in PIPELINE.glob("service/web/static/*.js"))]
    assert any(p.name == "index.html" for p in files) and any(p.suffix == ".js" for p in files)
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}" for p in files
                 for n, line in enumerate(p.read_text().splitlines(), 1) if _TEMPLATE_SPLIT.search(line)]
    assert not offenders, "use the CaseId's parts (e.g. case_id.without_family):\n" + "\n".join(offenders)
