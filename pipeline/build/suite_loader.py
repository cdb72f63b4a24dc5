"""Find a suite in a git checkout, pin it to a commit, export it, and load it by path.

What gets benchmarked is the suite *at a commit*: `export_suite` extracts the committed tree
(`git archive`), so uncommitted edits are never built, by design. `uncommitted_changes` names
them, so that a user is told; `commit_worktree` turns the working tree into a commit (on top of
HEAD, kept under `refs/benchfarm/worktree/`) for a run of what is on disk. `load_suite` imports that copy
as a package under a private, unique module name (never `import kernels`: a PyPI package of that
name exists, and two commits must be loadable side by side in one process).
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import traceback
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType

from pipeline.build.suite_api import KernelCase
from pipeline.contracts import CommitInfo, bundle_dir

__all__ = [
    "SuiteError", "SuiteLocation", "locate_suite", "resolve_commit", "suite_digest", "export_suite",
    "load_suite", "load_suite_module", "commit_history", "default_suite", "uncommitted_changes", "commit_worktree",
    "on_first_parent_line", "suite_cases", "changed_suite_files",
    "WORKTREE_REF_PREFIX",
]

WORKTREE_REF_PREFIX = "refs/benchfarm/worktree/"
"""Where commits of a working tree are kept (so that git does not collect them while results refer to them)."""
WORKTREE_AUTHOR = ("benchfarm (working tree)", "benchfarm@localhost")


class SuiteError(RuntimeError):
    """The suite cannot be found, exported or loaded; the message names the path or file."""


@dataclass(frozen=True)
class SuiteLocation:
    repo_root: Path
    subdir: str          # the suite folder relative to repo_root, POSIX style; "." for the root

    @property
    def repository(self) -> str:
        """`owner/name` from the `origin` remote's URL; the checkout folder's name without one."""
        proc = subprocess.run(["git", "-C", str(self.repo_root), "remote", "get-url", "origin"],
                              capture_output=True, text=True, check=False)
        url = proc.stdout.strip().removesuffix("/").removesuffix(".git")
        hosted = re.match(r"^[a-z+]+://[^/]+/|^[^/:]+@[^:]+:", url) and not url.startswith("file:")
        match = re.search(r"[:/]([^/:]+/[^/:]+)$", url) if proc.returncode == 0 and hosted else None
        return match.group(1) if match else self.repo_root.name

    @property
    def path(self) -> Path:
        return self.repo_root / self.subdir


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return _git_bytes(repo, *args, env=env).decode()


def _git_bytes(repo: Path, *args: str, env: dict[str, str] | None = None) -> bytes:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False,
                              env={**os.environ, **env} if env else None)
    except FileNotFoundError:
        raise SuiteError("git is not installed") from None
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise SuiteError(f"git {' '.join(args)} failed in {repo}: {err}")
    return proc.stdout


def locate_suite(path: Path | str) -> SuiteLocation:
    """The git checkout holding `path` and the suite folder's place in it."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise SuiteError(f"suite folder {path} does not exist")
    try:
        root = Path(_git(path, "rev-parse", "--show-toplevel").strip()).resolve()
    except SuiteError as exc:
        raise SuiteError(f"{path} is not inside a git checkout ({exc})") from None
    subdir = path.relative_to(root).as_posix() or "."
    return SuiteLocation(repo_root=root, subdir=subdir)


def default_suite(cwd: Path | str | None = None) -> Path:
    """The suite `benchfarm` works on when given no --suite: `kernels/` of the git checkout holding
    the working directory (the checkout the user is in, not the one benchfarm was installed from)."""
    here = Path(cwd or Path.cwd()).resolve()
    try:
        root = Path(_git(here, "rev-parse", "--show-toplevel").strip())
    except SuiteError:
        raise SuiteError(f"{here} is not inside a git checkout: run benchfarm in your suite's checkout, "
                         "or pass --suite PATH") from None
    suite = root / "kernels"
    if not (suite / "__init__.py").is_file():
        raise SuiteError(f"the checkout {root} has no suite folder kernels/ (with an __init__.py defining cases()): "
                         "pass --suite PATH")
    return suite


def uncommitted_changes(location: SuiteLocation) -> list[str]:
    """Files of the suite folder whose working-tree content differs from HEAD (modified, staged,
    deleted, or new and not ignored), as `path (what)` relative to the checkout's root."""
    out = _git(location.repo_root, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--",
               location.subdir)
    kinds = {"M": "modified", "A": "added", "D": "deleted", "R": "renamed", "C": "copied", "T": "type changed",
             "?": "not committed", "U": "unmerged"}
    changes, fields = [], iter(out.split("\0"))
    for field in fields:
        if len(field) < 4:
            continue
        status, path = field[:2], field[3:]
        if "R" in status or "C" in status:
            next(fields, None)   # the rename's source path follows
        kind = next((kinds[c] for c in (status[1], status[0]) if c in kinds), "changed")
        changes.append(f"{path} ({kind})")
    return changes


def commit_worktree(location: SuiteLocation) -> str:
    """A commit of HEAD with the suite folder as it is in the working tree (untracked files too,
    ignored ones not), made without touching the index, the branch or the files; its message and
    author say it is a working tree. It is kept under `refs/benchfarm/worktree/<sha>`. The same
    content gives the same tree, so its suite digest (and the compile cache) match a later commit
    of the same edits."""
    head = resolve_commit(location, "HEAD")
    changes = uncommitted_changes(location)
    with tempfile.TemporaryDirectory(prefix="benchfarm-index-") as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(location.repo_root, "read-tree", head, env=index)
        _git(location.repo_root, "add", "-A", "--", location.subdir, env=index)
        tree = _git(location.repo_root, "write-tree", env=index).strip()
    name, email = WORKTREE_AUTHOR
    who = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name,
           "GIT_COMMITTER_EMAIL": email}
    listed = "\n".join(f"- {c}" for c in changes) or "- (none: the same content as HEAD)"
    message = (f"benchfarm: working tree of {location.subdir}/ on top of {head[:10]} (not a commit of yours)\n\n"
               f"Uncommitted changes benchmarked:\n{listed}\n")
    sha = _git(location.repo_root, "commit-tree", tree, "-p", head, "-m", message, env=who).strip()
    _git(location.repo_root, "update-ref", f"{WORKTREE_REF_PREFIX}{sha}", sha)
    return sha


def on_first_parent_line(location: SuiteLocation, sha: str, tip: str = "HEAD") -> bool:
    """Whether `sha` is `tip` or one of its first-parent ancestors (what `git log --first-parent TIP`
    lists): the line of history a checkout is on. A working-tree commit, another branch's commit or
    a commit merged in from a side branch is not."""
    head = resolve_commit(location, tip)
    return sha == head or sha in _git(location.repo_root, "rev-list", "--first-parent", head).split()


def resolve_commit(location: SuiteLocation, ref: str = "HEAD") -> str:
    """The full sha of `ref` (branch, tag, short sha...); an unknown ref is a SuiteError in plain words."""
    try:
        return _git(location.repo_root, "rev-parse", "--verify", "--quiet", "--end-of-options",
                    f"{ref}^{{commit}}").strip()
    except SuiteError:
        raise SuiteError(f"no commit {ref!r} in {location.repo_root} (give a branch, a tag or a commit sha; "
                         "`git log --oneline` lists commits)") from None


def _tree_spec(location: SuiteLocation, sha: str) -> str:
    return sha if location.subdir == "." else f"{sha}:{location.subdir}"


def suite_digest(location: SuiteLocation, sha: str) -> str:
    """The git tree id of the suite folder at `sha`: equal digests mean identical suite sources."""
    spec = f"{sha}^{{tree}}" if location.subdir == "." else f"{sha}:{location.subdir}"
    try:
        tree = _git(location.repo_root, "rev-parse", "--verify", spec).strip()
        kind = _git(location.repo_root, "cat-file", "-t", tree).strip()
    except SuiteError as exc:
        raise SuiteError(f"commit {sha[:12]} has no suite folder {location.subdir!r}: {exc}") from None
    if kind != "tree":
        raise SuiteError(f"{location.subdir!r} at commit {sha[:12]} is a {kind}, not a folder")
    return tree


def export_suite(location: SuiteLocation, sha: str, dest: Path) -> Path:
    """Extract the committed suite folder at `sha` into `dest` (created; must not hold files)."""
    suite_digest(location, sha)  # a clear error when the folder is missing at that commit
    data = _git_bytes(location.repo_root, "archive", "--format=tar", _tree_spec(location, sha))
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SuiteError(f"export destination {dest} is not empty")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    return dest


@contextmanager
def _no_bytecode() -> Iterator[None]:
    """Keep imports from writing __pycache__ into an exported suite or a bundle."""
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        yield
    finally:
        sys.dont_write_bytecode = saved


def _failing_file(exc: BaseException, suite_dir: Path) -> str:
    """The innermost suite file in the traceback (or the package's __init__.py)."""
    inside = [
        frame.filename for frame in traceback.extract_tb(exc.__traceback__)
        if Path(frame.filename).resolve().is_relative_to(suite_dir)
    ]
    if isinstance(exc, SyntaxError) and exc.filename:
        inside.append(exc.filename)
    return inside[-1] if inside else str(suite_dir / "__init__.py")


def _import_package(suite_dir: Path, name: str) -> ModuleType:
    init = suite_dir / "__init__.py"
    if not init.is_file():
        raise SuiteError(f"suite folder {suite_dir} has no __init__.py")
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(suite_dir)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _no_bytecode():
            spec.loader.exec_module(module)
    except Exception as exc:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        raise SuiteError(f"loading the suite failed in {_failing_file(exc, suite_dir)}: {type(exc).__name__}: {exc}") from exc
    return module


def load_suite(suite_dir: Path | str, *, digest: str | None = None) -> list[KernelCase]:
    """Import the suite folder as a package and return `cases()`; case ids must be unique.

    The package name is `_benchfarm_suite_<digest prefix>_<random>`: private, and unique per load,
    so two versions of a suite never share modules.
    """
    suite_dir = Path(suite_dir).resolve()
    name = f"_benchfarm_suite_{(digest or 'x')[:12]}_{uuid.uuid4().hex[:8]}"
    package = _import_package(suite_dir, name)
    init = suite_dir / "__init__.py"
    make_cases = getattr(package, "cases", None)
    if not callable(make_cases):
        raise SuiteError(f"{init} defines no cases() function")
    try:
        with _no_bytecode():
            cases = list(make_cases())
    except Exception as exc:
        raise SuiteError(f"cases() failed in {_failing_file(exc, suite_dir)}: {type(exc).__name__}: {exc}") from exc
    seen: dict[str, KernelCase] = {}
    for case in cases:
        if not isinstance(case, KernelCase):
            raise SuiteError(f"{init}: cases() returned {type(case).__name__}, not KernelCase")
        key = str(case.case_id)
        if key in seen:
            raise SuiteError(f"{init}: duplicate case id {key}")
        seen[key] = case
    return cases


def suite_cases(location: SuiteLocation, sha: str) -> list[KernelCase]:
    """The suite's cases at `sha` (exported into a temporary folder, loaded, the folder removed), for
    their ids and the targets they support before anything is built: their sources are not made."""
    with tempfile.TemporaryDirectory(prefix="benchfarm-cases-") as tmp:
        return load_suite(export_suite(location, sha, Path(tmp) / "suite"), digest=suite_digest(location, sha))


def changed_suite_files(location: SuiteLocation, base: str, head: str) -> set[str]:
    """The suite's files (relative to its folder, as `KernelCase.source_files` names them) that differ
    between two commits."""
    out = _git(location.repo_root, "diff", "--name-only", "-z", base, head, "--", location.subdir)
    prefix = "" if location.subdir == "." else location.subdir + "/"
    return {name.removeprefix(prefix) for name in out.split("\0") if name}


def load_suite_module(suite_dir: Path | str, module: str) -> ModuleType:
    """`pipeline.contracts.bundle_dir.load_suite_module`, its failures as SuiteError."""
    try:
        return bundle_dir.load_suite_module(suite_dir, module)
    except bundle_dir.BundleModuleError as exc:
        raise SuiteError(str(exc)) from exc


_FIELD, _RECORD = "\x1f", "\x1e"


def commit_history(location: SuiteLocation, sha: str, limit: int = 100) -> list[CommitInfo]:
    """`sha` and its first-parent ancestors (newest first, at most `limit`), each with all parents."""
    fmt = _FIELD.join(["%H", "%P", "%an <%ae>", "%cI", "%B"]) + _RECORD
    out = _git(location.repo_root, "log", "--first-parent", f"--max-count={limit}", f"--format={fmt}", sha)
    commits = []
    for record in out.split(_RECORD):
        record = record.lstrip("\n")
        if not record:
            continue
        full, parents, author, date, message = record.split(_FIELD, 4)
        commits.append(CommitInfo(
            sha=full, parents=parents.split(), author=author, message=message.strip(),
            committed_at=datetime.fromisoformat(date),
        ))
    return commits
