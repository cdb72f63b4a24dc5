from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.build.suite_loader import (
    SuiteError, commit_history, export_suite, load_suite, load_suite_module, locate_suite, resolve_commit,
    suite_digest,
)
from tests.helpers.suite_repo import GemmCase, case_id, commit_all, gemm_suite_files, git, make_suite_repo, write_files

REPO_ROOT = Path(__file__).resolve().parents[2]


def _ids(suite_dir: Path) -> list[str]:
    return [str(c.case_id) for c in load_suite(suite_dir)]


def test_two_commits_load_their_own_cases_and_skip_uncommitted_changes(tmp_path: Path) -> None:
    a, b, c = GemmCase("a"), GemmCase("b", m=4), GemmCase("c", m=2)
    repo = make_suite_repo(tmp_path, gemm_suite_files([a]))
    location = locate_suite(repo / "kernels")
    first = resolve_commit(location)
    write_files(repo, gemm_suite_files([a, b]))
    second = commit_all(repo, "add b")
    write_files(repo, gemm_suite_files([a, b, c]))  # not committed

    assert location.subdir == "kernels" and location.repo_root == repo.resolve()
    assert _ids(export_suite(location, first, tmp_path / "first")) == [case_id(a)]
    assert _ids(export_suite(location, second, tmp_path / "second")) == [case_id(a), case_id(b)]
    assert resolve_commit(location, "HEAD") == second
    assert resolve_commit(location, first[:10]) == first
    assert suite_digest(location, first) != suite_digest(location, second)


def test_digest_ignores_changes_outside_the_suite(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, {**gemm_suite_files([GemmCase("a")]), "README": "one"})
    location = locate_suite(repo / "kernels")
    first = resolve_commit(location)
    write_files(repo, {"README": "two"})
    second = commit_all(repo, "docs")
    assert first != second
    assert suite_digest(location, first) == suite_digest(location, second)


def test_duplicate_case_ids_are_an_error_naming_them(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("a"), GemmCase("a")]))
    with pytest.raises(SuiteError, match=r"duplicate case id gemm/a/8x16x32/f32/iree"):
        load_suite(repo / "kernels")


def test_a_suite_that_fails_to_import_names_the_file(tmp_path: Path) -> None:
    files = gemm_suite_files([GemmCase("a")])
    files["kernels/__init__.py"] = "from . import broken\n" + files["kernels/__init__.py"]
    files["kernels/broken.py"] = "x = 1\nraise RuntimeError('boom')\n"
    repo = make_suite_repo(tmp_path, files)
    with pytest.raises(SuiteError, match=r"broken\.py.*boom"):
        load_suite(repo / "kernels")


def test_not_a_git_checkout(tmp_path: Path) -> None:
    (tmp_path / "suite").mkdir()
    with pytest.raises(SuiteError, match="not inside a git checkout"):
        locate_suite(tmp_path / "suite")


def test_missing_suite_folder_at_a_commit(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, {"README": "no suite yet"})
    first = git(repo, "rev-parse", "HEAD")
    write_files(repo, gemm_suite_files([GemmCase("a")]))
    commit_all(repo, "suite")
    location = locate_suite(repo / "kernels")
    with pytest.raises(SuiteError, match="has no suite folder 'kernels'"):
        export_suite(location, first, tmp_path / "out")


def test_commit_history_follows_first_parents_and_keeps_all_parents(tmp_path: Path) -> None:
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("a")]))
    root = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "side")
    write_files(repo, {"side.txt": "x"})
    side = commit_all(repo, "side work")
    git(repo, "checkout", "-q", "main")
    write_files(repo, {"main.txt": "y"})
    main = commit_all(repo, "main work\n\nwith a body")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(repo, "rev-parse", "HEAD")

    history = commit_history(locate_suite(repo / "kernels"), merge)
    assert [c.sha for c in history] == [merge, main, root]
    assert history[0].parents == [main, side]
    assert history[1].message == "main work\n\nwith a body"
    assert history[1].author == "Bench Tester <tester@example.com>"
    assert history[2].parents == []
    assert len(commit_history(locate_suite(repo), merge, limit=2)) == 2


def test_reference_module_loads_alone_from_a_suite_copy(tmp_path: Path) -> None:
    files = gemm_suite_files([GemmCase("a")])
    files["kernels/__init__.py"] = "raise ImportError('package init must not run')\n"
    repo = make_suite_repo(tmp_path, files)
    module = load_suite_module(repo / "kernels", "reference")
    assert module.matmul([[1.0, 2.0]], [[3.0], [4.0]]).tolist() == [[11.0]]
    assert not list((repo / "kernels").rglob("__pycache__"))
    with pytest.raises(SuiteError, match="not found"):
        load_suite_module(repo / "kernels", "nope")


def test_default_suite_loads_without_importing_a_compiler() -> None:
    script = (
        "import sys\n"
        "from pipeline.build.suite_loader import load_suite\n"
        f"cases = load_suite({str(REPO_ROOT / 'kernels')!r})\n"
        "assert not [m for m in sys.modules if m.startswith('iree')], 'suite imported iree'\n"
        "assert 'kernels' not in sys.modules\n"
        "print('\\n'.join(str(c.case_id) for c in cases))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert "gemm/llama3-8b-q-proj-decode/1x4096x4096/f32/iree" in out
    assert "gemm/square-512/512x512x512/f32/iree" in out
    assert len(out) == len(set(out))


def test_uncommitted_changes_are_named_and_a_worktree_commit_holds_them(tmp_path: Path) -> None:
    from pipeline.build.suite_loader import WORKTREE_REF_PREFIX, commit_worktree, default_suite, uncommitted_changes

    a, b = GemmCase("a"), GemmCase("b", m=4)
    repo = make_suite_repo(tmp_path, {**gemm_suite_files([a]), "README": "one"})
    (repo / "kernels" / "sub").mkdir()
    location = locate_suite(repo / "kernels")
    head = resolve_commit(location)
    assert uncommitted_changes(location) == []
    assert default_suite(repo / "kernels" / "sub") == repo.resolve() / "kernels"

    write_files(repo, {**gemm_suite_files([a, b]), "kernels/extra.py": "X = 1\n", "README": "two"})
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "kernels" / "run.log").write_text("ignored\n")
    assert uncommitted_changes(location) == ["kernels/__init__.py (modified)", "kernels/extra.py (not committed)"]

    sha = commit_worktree(location)
    assert _ids(export_suite(location, sha, tmp_path / "wt")) == [case_id(a), case_id(b)]
    assert git(repo, "rev-parse", f"{sha}^") == head                 # on top of HEAD
    assert git(repo, "rev-parse", "HEAD") == head                    # HEAD, index and files untouched
    assert git(repo, "show", f"{sha}:README") == "one"               # only the suite folder is taken
    assert git(repo, "rev-parse", f"{WORKTREE_REF_PREFIX}{sha}") == sha
    message = git(repo, "log", "-1", "--format=%an%n%B", sha)
    assert message.startswith("benchfarm (working tree)\nbenchfarm: working tree of kernels/ on top of")
    assert "kernels/extra.py (not committed)" in message and "run.log" not in message
    assert uncommitted_changes(location) == ["kernels/__init__.py (modified)", "kernels/extra.py (not committed)"]


def test_default_suite_outside_a_checkout_says_what_to_do(tmp_path: Path) -> None:
    from pipeline.build.suite_loader import default_suite

    with pytest.raises(SuiteError, match="not inside a git checkout.*--suite"):
        default_suite(tmp_path)
    repo = make_suite_repo(tmp_path, {"README": "no suite here"})
    with pytest.raises(SuiteError, match="no suite folder kernels/.*--suite"):
        default_suite(repo)
