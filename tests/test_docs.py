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
])
def test_stale_claim_is_gone(path: str, stale: str) -> None:
    assert stale not in (ROOT / path).read_text()
