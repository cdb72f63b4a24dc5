"""A PostgreSQL server of a test's own: its own data directory (`initdb`) and port, started,
stopped and restarted with `pg_ctl`, so that a test can take the store away under a running
service. Uses the server binaries of the machine's PostgreSQL install (Debian:
/usr/lib/postgresql/N/bin); `initdb` refuses to run as root, so under root the server runs as the
`postgres` system user (the Debian install makes it) in a folder that user owns."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.helpers.live_server import free_port

DATABASE = "benchfarm"
SUPERUSER = "benchfarm"


def server_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl: on the PATH, else the newest /usr/lib/postgresql/N/bin."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


def why_not() -> str | None:
    """Why this machine cannot run a server of its own (None: it can)."""
    if server_binaries() is None:
        return "no PostgreSQL server binaries (initdb, pg_ctl): install postgresql (Debian: postgresql-15)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no `postgres` user to run initdb as (initdb refuses root)"
    return None


@dataclass
class PgServer:
    bin_dir: Path
    root: Path
    """Owned by the server's user: data/ (the cluster), the socket, the log."""
    port: int
    user: str | None
    """Who the server runs as (None: this process's user)."""

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def url_of(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    @property
    def url(self) -> str:
        return self.url_of(DATABASE)

    def _run(self, *argv: str, timeout_s: float = 120) -> None:
        done = subprocess.run([str(self.bin_dir / argv[0]), *argv[1:]], user=self.user, cwd=self.root,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stdout}{done.stderr}\n"
                               f"{self.log.read_text() if self.log.exists() else ''}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-sync")

    def start(self) -> None:
        """Start and wait until it takes connections (`pg_ctl -w`)."""
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} "
                   "-c fsync=off -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop (fast: open connections are cut, as a restart by an operator does)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def running(self) -> bool:
        try:
            psycopg.connect(self.url, connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True


@contextmanager
def own_server() -> Iterator[PgServer]:
    """A fresh cluster with database `benchfarm` on a free port, removed afterwards. Call `why_not()`
    first to skip where the machine cannot run one."""
    bin_dir = server_binaries()
    assert bin_dir is not None, why_not()
    # Not under pytest's tmp_path: its folders are private to root, and the server may run as `postgres`.
    root = Path(tempfile.mkdtemp(prefix="benchfarm-pg-"))
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = PgServer(bin_dir=bin_dir, root=root, port=free_port(), user=user)
    try:
        server.init()
        server.start()
        with psycopg.connect(server.url_of("postgres"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{DATABASE}"')
        yield server
    finally:
        try:
            if server.data.exists() and (server.data / "postmaster.pid").exists():
                server.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)
