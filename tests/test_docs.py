"""What the documentation says is so: commands the README names exist, and claims found stale in
review (issue 14, item 7) stay gone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _subcommands() -> set[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return set(sub.choices)  # type: ignore[attr-defined]


def test_the_architecture_table_names_every_package_folder_and_only_those() -> None:
    """One row per top-level folder of pipeline/ (issue 15), and every place a row names exists."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("| part | where | what it does |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        rows.append(line)
    wheres = [row.split("|")[2].strip() for row in rows]
    named = sorted(w.strip("`") for w in wheres if w.startswith("`pipeline/") and w.endswith("/`"))
    folders = sorted(f"pipeline/{p.name}/" for p in (ROOT / "pipeline").iterdir() if (p / "__init__.py").is_file())
    assert named == folders, (named, folders)
    for where in wheres:
        path = where.strip("`")
        assert list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists(), where


def test_readme_names_only_real_commands() -> None:
    named = set(re.findall(r"`benchfarm ([a-z][a-z-]*)", (ROOT / "README.md").read_text()))
    assert named and named <= _subcommands(), named - _subcommands()


@pytest.mark.parametrize(("path", "stale"), [
    ("README.md", "later issues"),
    ("pipeline/service/auth.py", "come later"),
    ("pipeline/local_pipeline.py", "`benchfarm up` calls it"),
    ("pipeline/agents/runners/iree_runner.py", "with `measure.sample`"),
    ("pipeline/config.py", "NVBench's cold-measurement defaults for GPUs"),
    ("pipeline/config.py", "Noise-based stopping (NVBench's method)"),
    ("pipeline/agents/measure.py", "until the median is known well"),
    ("pipeline/agents/measure.py", "max_rel_noise"),
    ("pipeline/config.py", "def per_round"),
    ("pipeline/config.py", "ContextVar"),
])
def test_stale_claim_is_gone(path: str, stale: str) -> None:
    assert stale not in (ROOT / path).read_text()


BENCHMARKS = ROOT / "BENCHMARKS.md"
HISTORY = ROOT / "docs" / "benchmarks" / "history.md"
_SEARCHED = ("pipeline", "bench", "tests", "docs")


def _citations() -> list[tuple[Path, str, str]]:
    """(file, cited document, what follows the name) for every place that cites a benchmarks document."""
    cited = re.compile(r"(BENCHMARKS\.md|docs/benchmarks/history\.md)\)?(?:,\s*|\s+)(\(?\"[^\"]+\"|issue \d+)")
    found = []
    paths = [ROOT / "README.md"] + [p for d in _SEARCHED for p in (ROOT / d).rglob("*") if p.suffix in {".py", ".md"}]
    for path in paths:
        if path in (BENCHMARKS, HISTORY, Path(__file__).resolve()):
            continue
        text = re.sub(r"\s+", " ", path.read_text())
        found += [(path, m.group(1), m.group(2).lstrip("(").strip('"')) for m in cited.finditer(text)]
    return found


def test_benchmarks_shows_the_current_figures_in_under_600_lines() -> None:
    """Today's figure per area (issue 35); the sessions that led there live in the history file."""
    lines = BENCHMARKS.read_text().splitlines()
    assert len(lines) < 600, len(lines)
    assert "docs/benchmarks/history.md" in BENCHMARKS.read_text()
    areas = {line[3:] for line in lines if line.startswith("## ")}
    history_areas = {line[3:] for line in HISTORY.read_text().splitlines() if line.startswith("## ")}
    assert history_areas <= areas, history_areas - areas


def test_files_the_benchmarks_name_exist() -> None:
    for doc in (BENCHMARKS, HISTORY):
        named = set(re.findall(r"docs/benchmarks/[\w.-]+\.(?:json|csv|md)", doc.read_text()))
        assert named, doc
        assert all((ROOT / p).is_file() for p in named), sorted(p for p in named if not (ROOT / p).is_file())


def test_citations_of_the_benchmarks_find_what_they_name() -> None:
    """A docstring that says `BENCHMARKS.md ("UI latency")` or `docs/benchmarks/history.md, issue 11`
    points at a section or an issue the document has."""
    citations = _citations()
    assert len(citations) >= 5, citations
    for path, doc, what in citations:
        text = (ROOT / doc).read_text()
        if what.startswith("issue "):
            assert re.search(rf"\b{what}\b", text), (path, doc, what)
        else:
            assert f"## {what}" in text, (path, doc, what)


DESIGN = ROOT / "docs" / "design.md"
_NAMED_PATH = re.compile(r"(?<![\w./-])((?:pipeline|tests|docs|bench|infra|kernels)/[\w./-]*\w)(?![\w*])")
_DESIGN_CITATION = re.compile(r"design\.md\)?,?\s*\(?\\?[\"']([^\"'\\]+)\\?[\"']")
NOT_FILES = {"tests/test_gemm.py": "pytest-benchmark's example of a test's fullname (contracts/foreign/pytest_benchmark.py)"}


def _documented_files() -> list[Path]:
    """The docstrings, templates and documents a reader follows: the package, the README and the design."""
    suffixes = {".py", ".md", ".html", ".js", ".j2", ".json"}
    return [ROOT / "README.md", DESIGN] + sorted(p for p in (ROOT / "pipeline").rglob("*")
                                                 if p.is_file() and p.suffix in suffixes)


def test_no_docstring_or_document_names_a_file_the_repository_lacks() -> None:
    """Issue 35: 17 docstrings once pointed to a DESIGN.md that was never in the repository."""
    missing = [(str(path.relative_to(ROOT)), named) for path in _documented_files()
               for named in _NAMED_PATH.findall(path.read_text())
               if named not in NOT_FILES and not (ROOT / named).exists()]
    assert missing == []
    assert "DESIGN.md" not in " ".join(path.read_text() for path in _documented_files())


def test_citations_of_the_design_find_their_section() -> None:
    """`docs/design.md, "Comparison"` (or `("PR comment")`) names a `## ` section the design has."""
    sections = {line[3:].strip() for line in DESIGN.read_text().splitlines() if line.startswith("## ")}
    cited = {(str(path.relative_to(ROOT)), name) for path in _documented_files()
             for name in _DESIGN_CITATION.findall(re.sub(r"\s+", " ", path.read_text()))}
    assert len(cited) >= 20, cited
    assert sorted((path, name) for path, name in cited if name not in sections) == []
