"""A stand-in for an Android phone's adbd: a TCP server speaking the adb wire protocol, so that the
real `adb` client and server (Debian's `adb`) talk to it after `adb connect 127.0.0.1:PORT`.

What it stands in for: adbd on an arm64 phone, as seen over `adb tcpip`. What it implements:

- transport: 24-byte messages (command, arg0, arg1, length, checksum, magic = ~command), CNXN
  answered with a `device::ro.product.name=...;ro.product.model=...;ro.product.device=...;features=`
  banner (features `shell_v2,cmd,stat_v2`; no AUTH, i.e. an already-authorized host), streams with
  OPEN / OKAY / WRTE / CLSE and one-WRTE-in-flight flow control per stream;
- `shell:` (v1: raw output, closed at exit) and `shell,v2,...:` / `exec:` (v2 framing: stdout (1),
  stderr (2) and exit (3) packets; stdin (0) and close-stdin (4) are read and dropped);
- `sync:`: STAT, STA2 / LST2, LIST, SEND (DATA... DONE -> OKAY), RECV (DATA... DONE), QUIT.

The phone's filesystem is a folder (`root`): `/data/...` and `/sys/...` in shell commands and sync
paths are that folder's `data/` and `sys/` (shell commands are rewritten textually and run by the
host's `/bin/sh`, standing in for Android's mksh; `cd` starts at `root`). It holds fake but
plausible sysfs: one cpufreq policy per cluster (`scaling_governor`, `related_cpus`,
`cpuinfo_max_freq`), and thermal zones whose temperatures the test sets (`set_temperature`,
`heat(..., cool_after_s=...)`). Android's tools are small scripts on the shell's PATH: `getprop`
(the properties given), `id` (uid 2000, or 0 under su), `su` (only when `rooted`; `su 0 CMD...`
and `su -c CMD`), and `taskset MASK CMD...`, which records the mask and runs CMD unpinned (the mask
names the phone's CPUs, not this host's).

arm64 code runs under qemu-user: binfmt_misc is often not registered in containers, so an aarch64
ELF pushed through sync is kept aside and its path on the "phone" becomes a script that runs it
with `qemu-aarch64 -L SYSROOT` (STAT and RECV still serve the ELF itself). `fail_when(regex)` makes
matching shell commands exit 1, to test what the agent does when a case fails mid-run.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

A_CNXN, A_OPEN, A_OKAY, A_WRTE, A_CLSE, A_AUTH = (
    int.from_bytes(name, "little") for name in (b"CNXN", b"OPEN", b"OKAY", b"WRTE", b"CLSE", b"AUTH")
)
A_VERSION = 0x01000001       # skips checksums; we still send them
MAX_PAYLOAD = 256 * 1024
SYNC_DATA_MAX = 64 * 1024
SHELL_STDIN, SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT, SHELL_CLOSE_STDIN = 0, 1, 2, 3, 4
ACK_TIMEOUT_S = 30.0
EM_AARCH64 = 183


@dataclass
class Cluster:
    name: str
    cpus: list[int]
    max_khz: int
    governor: str = "schedutil"


@dataclass(frozen=True)
class ShellCall:
    """One shell command the phone ran: when it started, the text, the governors at that moment."""

    at: float
    command: str
    governors: dict[str, str]


PIXEL_8_PRO_CLUSTERS = (Cluster("little", [0, 1, 2, 3], 1704000), Cluster("mid", [4, 5, 6, 7], 2367000),
                        Cluster("big", [8], 2910000))


def _header(command: int, arg0: int, arg1: int, payload: bytes) -> bytes:
    return struct.pack("<6I", command, arg0, arg1, len(payload), sum(payload) & 0xFFFFFFFF, command ^ 0xFFFFFFFF)


class _Stream:
    """One adb stream on one connection: bytes the client wrote (read with `read_exact`) and
    writes back to it, one WRTE at a time (each waits for the client's OKAY)."""

    def __init__(self, conn: _Connection, local_id: int, remote_id: int):
        self.conn, self.local_id, self.remote_id = conn, local_id, remote_id
        self._buffer = bytearray()
        self._cond = threading.Condition()
        self._closed_in = False
        self._acked = threading.Event()
        self._closed_out = False

    def feed(self, data: bytes) -> None:
        with self._cond:
            self._buffer += data
            self._cond.notify_all()

    def close_in(self) -> None:
        with self._cond:
            self._closed_in = True
            self._cond.notify_all()
        self._acked.set()

    def ack(self) -> None:
        self._acked.set()

    def read_exact(self, n: int) -> bytes:
        with self._cond:
            while len(self._buffer) < n:
                if self._closed_in:
                    raise EOFError("stream closed by the client")
                self._cond.wait()
            data = bytes(self._buffer[:n])
            del self._buffer[:n]
            return data

    def write(self, data: bytes) -> None:
        step = min(self.conn.max_payload, MAX_PAYLOAD)
        for start in range(0, len(data), step):
            if self._closed_in:
                raise EOFError("stream closed by the client")
            self._acked.clear()
            self.conn.send(A_WRTE, self.local_id, self.remote_id, data[start:start + step])
            if not self._acked.wait(ACK_TIMEOUT_S):
                raise TimeoutError("the client never acknowledged a write")

    def close(self) -> None:
        if not self._closed_out:
            self._closed_out = True
            self.conn.send(A_CLSE, self.local_id, self.remote_id, b"")
            self.conn.streams.pop(self.local_id, None)


class _Connection:
    def __init__(self, sock: socket.socket, phone: AdbdStandin):
        self.sock, self.phone = sock, phone
        self.max_payload = 4096
        self.streams: dict[int, _Stream] = {}
        self._send_lock = threading.Lock()
        self._next_id = 1

    def send(self, command: int, arg0: int, arg1: int, payload: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(_header(command, arg0, arg1, payload) + payload)

    def _recv_exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return bytes(data)

    def serve(self) -> None:
        try:
            while True:
                command, arg0, arg1, length, _check, magic = struct.unpack("<6I", self._recv_exact(24))
                if magic != command ^ 0xFFFFFFFF:
                    raise ValueError(f"bad magic on command {command:#x}")
                payload = self._recv_exact(length) if length else b""
                self._dispatch(command, arg0, arg1, payload)
        except (EOFError, OSError, ValueError):
            pass
        finally:
            for stream in list(self.streams.values()):
                stream.close_in()
            self.sock.close()

    def _dispatch(self, command: int, arg0: int, arg1: int, payload: bytes) -> None:
        if command == A_CNXN:
            self.max_payload = max(4096, min(arg1, MAX_PAYLOAD))
            self.send(A_CNXN, A_VERSION, MAX_PAYLOAD, self.phone.banner().encode())
        elif command == A_OPEN:
            local_id, self._next_id = self._next_id, self._next_id + 1
            stream = _Stream(self, local_id, arg0)
            self.streams[local_id] = stream
            service = payload.rstrip(b"\0").decode()
            self.phone.services.append(service)
            self.send(A_OKAY, local_id, arg0, b"")
            threading.Thread(target=self._run_service, args=(stream, service), daemon=True).start()
        elif command in (A_OKAY, A_WRTE, A_CLSE):
            target = self.streams.get(arg1)
            if target is None:
                return
            if command == A_OKAY:
                target.ack()
            elif command == A_WRTE:
                target.feed(payload)
                self.send(A_OKAY, arg1, arg0, b"")
            else:
                self.streams.pop(arg1, None)
                target.close_in()
        # A_AUTH and anything else: ignored (this stand-in never asks for authentication)

    def _run_service(self, stream: _Stream, service: str) -> None:
        try:
            if service.startswith("sync:"):
                self.phone._sync(stream)
            elif service.startswith(("shell", "exec:")):
                name, _, command = service.partition(":")
                options = name.split(",")[1:]
                self.phone._shell(stream, command, v2=name == "exec" or "v2" in options, raw_v1=name == "exec")
        except (EOFError, OSError, TimeoutError):
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass


_GETPROP = """#!/bin/sh
props="$STANDIN_ROOT/.standin/props"
if [ $# -eq 0 ]; then
  while IFS='=' read -r k v; do echo "[$k]: [$v]"; done < "$props"
else
  v=$(grep -m1 "^$1=" "$props" | cut -d= -f2-); echo "${v:-$2}"
fi
"""
_ID = """#!/bin/sh
if [ "$STANDIN_UID" = 0 ]; then u=0; n=root; else u=2000; n=shell; fi
case "$1" in -u) echo $u ;; *) echo "uid=$u($n) gid=$u($n) groups=$u($n) context=u:r:shell:s0" ;; esac
"""
_SU = """#!/bin/sh
export STANDIN_UID=0
[ "$1" = "-c" ] && { shift; exec sh -c "$*"; }
case "$1" in 0|root) shift ;; esac
[ $# -eq 0 ] && exec sh
exec "$@"
"""
_TASKSET = """#!/bin/sh
echo "$1" >> "$STANDIN_ROOT/.standin/taskset.log"
shift
exec "$@"
"""
_ELF_SHIM = """#!/bin/sh
exec {qemu} -L {sysroot} {elf} "$@"
"""


@dataclass
class AdbdStandin:
    """An adbd for one fake arm64 phone on 127.0.0.1 (`start()` -> port; `serial` after start)."""

    root: Path
    model: str = "Pixel 8 Pro"
    device: str = "husky"
    soc: str = "Tensor G3"
    abi: str = "arm64-v8a"
    rooted: bool = True
    clusters: tuple[Cluster, ...] = PIXEL_8_PRO_CLUSTERS
    thermal_zones: tuple[str, ...] = ("cpu-big", "cpu-mid", "cpu-little", "battery")
    qemu: str = "qemu-aarch64"
    sysroot: Path = Path("/usr/aarch64-linux-gnu")
    services: list[str] = field(default_factory=list)
    shell_log: list[ShellCall] = field(default_factory=list)
    cooled_at: dict[str, float] = field(default_factory=dict)
    failures: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    _fail_patterns: list[re.Pattern[str]] = field(default_factory=list)
    _shadows: dict[str, Path] = field(default_factory=dict)
    _server: socket.socket | None = None
    _timers: list[threading.Timer] = field(default_factory=list)
    port: int = 0

    # ---- the phone's state -------------------------------------------------------------------

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        bin_dir = self.root / "system" / "bin"
        for folder in ("data/local/tmp", ".standin/elf", "system/bin"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        tools = {"getprop": _GETPROP, "id": _ID, "taskset": _TASKSET, **({"su": _SU} if self.rooted else {})}
        for name, text in tools.items():
            (bin_dir / name).write_text(text)
            (bin_dir / name).chmod(0o755)
        props = {
            "ro.product.model": self.model, "ro.product.device": self.device, "ro.product.name": self.device,
            "ro.soc.model": self.soc, "ro.board.platform": "zuma", "ro.product.cpu.abi": self.abi,
            "ro.product.cpu.abilist": f"{self.abi},armeabi-v7a,armeabi", "ro.build.version.release": "14",
            "ro.build.version.sdk": "34", "ro.serialno": "STANDIN" + hashlib.sha256(str(self.root).encode()).hexdigest()[:8],
            "ro.debuggable": "1" if self.rooted else "0",
        }
        (self.root / ".standin/props").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.root / ".standin/taskset.log").write_text("")
        cpus = [c for cluster in self.clusters for c in cluster.cpus]
        self._write("sys/devices/system/cpu/possible", f"0-{max(cpus)}")
        for cluster in self.clusters:
            policy = f"sys/devices/system/cpu/cpufreq/policy{cluster.cpus[0]}"
            self._write(f"{policy}/scaling_governor", cluster.governor)
            self._write(f"{policy}/scaling_available_governors", "sched_pixel schedutil performance powersave")
            self._write(f"{policy}/related_cpus", " ".join(map(str, cluster.cpus)))
            self._write(f"{policy}/cpuinfo_max_freq", str(cluster.max_khz))
        for index, zone in enumerate(self.thermal_zones):
            self._write(f"sys/class/thermal/thermal_zone{index}/type", zone)
            self.set_temperature(zone, 30.0)

    def _write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    @property
    def serial(self) -> str:
        return f"127.0.0.1:{self.port}"

    def banner(self) -> str:
        return (f"device::ro.product.name={self.device};ro.product.model={self.model};"
                f"ro.product.device={self.device};features=shell_v2,cmd,stat_v2")

    def governors(self) -> dict[str, str]:
        """policy name -> scaling_governor as the phone has it now."""
        base = self.root / "sys/devices/system/cpu/cpufreq"
        return {p.name: (p / "scaling_governor").read_text().strip() for p in sorted(base.glob("policy*"))}

    def _zone(self, zone: str) -> Path:
        return self.root / f"sys/class/thermal/thermal_zone{self.thermal_zones.index(zone)}/temp"

    def set_temperature(self, zone: str, celsius: float) -> None:
        self._zone(zone).write_text(f"{round(celsius * 1000)}\n")

    def heat(self, zone: str, celsius: float, *, cool_to: float = 30.0, cool_after_s: float) -> None:
        """`zone` reads `celsius` now and `cool_to` after `cool_after_s` seconds (`cooled_at[zone]`, monotonic)."""
        self.set_temperature(zone, celsius)
        def cool() -> None:
            self.set_temperature(zone, cool_to)
            self.cooled_at[zone] = time.monotonic()

        self.cooled_at.pop(zone, None)
        timer = threading.Timer(cool_after_s, cool)
        timer.daemon = True
        timer.start()
        self._timers.append(timer)

    def taskset_masks(self) -> list[str]:
        return (self.root / ".standin/taskset.log").read_text().split()

    def fail_when(self, pattern: str) -> None:
        """Shell commands matching `pattern` exit 1 (recorded in `failures` with the governors then)."""
        self._fail_patterns.append(re.compile(pattern))

    # ---- the server --------------------------------------------------------------------------

    def start(self) -> int:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        self._server, self.port = server, server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self.port

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_Connection(sock, self).serve, daemon=True).start()

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if self._server is not None:
            self._server.close()
            self._server = None

    # ---- services ----------------------------------------------------------------------------

    def _host_path(self, remote: str) -> Path:
        return self.root / remote.lstrip("/")

    def _rewrite(self, command: str) -> str:
        return re.sub(r"(?<![\w./-])/(data|sys)(?=/|\b)", lambda m: f"{self.root}/{m.group(1)}", command)

    def _shell(self, stream: _Stream, command: str, *, v2: bool, raw_v1: bool = False) -> None:
        self.shell_log.append(ShellCall(time.monotonic(), command, self.governors()))
        if v2 and not raw_v1:
            threading.Thread(target=self._drain_stdin, args=(stream,), daemon=True).start()
        if any(p.search(command) for p in self._fail_patterns):
            self.failures.append((command, self.governors()))
            out, err, code = b"", b"standin: made to fail\n", 1
        else:
            env = {"PATH": f"{self.root}/system/bin:/usr/bin:/bin", "STANDIN_ROOT": str(self.root),
                   "HOME": str(self.root / "data/local/tmp"), "TMPDIR": str(self.root / "data/local/tmp"),
                   "LC_ALL": "C"}
            proc = subprocess.run(["/bin/sh", "-c", self._rewrite(command) if command else "true"],
                                  cwd=self.root, env=env, capture_output=True, stdin=subprocess.DEVNULL, check=False)
            out, err, code = proc.stdout, proc.stderr, proc.returncode
        if not v2 or raw_v1:
            stream.write(out + err)
            return

        def packet(kind: int, data: bytes) -> bytes:
            return struct.pack("<BI", kind, len(data)) + data

        for kind, data in ((SHELL_STDOUT, out), (SHELL_STDERR, err)):
            for start in range(0, len(data), SYNC_DATA_MAX):
                stream.write(packet(kind, data[start:start + SYNC_DATA_MAX]))
        stream.write(packet(SHELL_EXIT, bytes([code & 0xFF])))

    @staticmethod
    def _drain_stdin(stream: _Stream) -> None:
        try:
            while True:
                _kind, length = struct.unpack("<BI", stream.read_exact(5))
                stream.read_exact(length)
        except EOFError:
            pass

    def _sync(self, stream: _Stream) -> None:
        while True:
            request, length = struct.unpack("<4sI", stream.read_exact(8))
            if request == b"QUIT":
                return
            argument = stream.read_exact(length).decode()
            if request == b"STAT":
                stream.write(self._stat_v1(argument))
            elif request in (b"STA2", b"LST2"):
                stream.write(self._stat_v2(request, argument))
            elif request == b"LIST":
                stream.write(self._list(argument))
            elif request == b"SEND":
                stream.write(self._receive_file(stream, argument))
            elif request == b"RECV":
                self._send_file(stream, argument)
            else:
                stream.write(self._fail(f"unknown sync request {request!r}"))
                return

    @staticmethod
    def _fail(message: str) -> bytes:
        return b"FAIL" + struct.pack("<I", len(message.encode())) + message.encode()

    def _real(self, remote: str) -> Path:
        """The file the phone has at `remote` (a pushed ELF's own bytes, not its qemu shim)."""
        return self._shadows.get(os.path.normpath(remote), self._host_path(remote))

    def _stat_v1(self, remote: str) -> bytes:
        try:
            st = self._real(remote).stat()
        except OSError:
            return b"STAT" + struct.pack("<3I", 0, 0, 0)
        return b"STAT" + struct.pack("<3I", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime))

    def _stat_v2(self, request: bytes, remote: str) -> bytes:
        try:
            st = self._real(remote).stat()
        except OSError as exc:
            return request + struct.pack("<IQQIIIIQqqq", exc.errno or errno.ENOENT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        return request + struct.pack("<IQQIIIIQqqq", 0, st.st_dev, st.st_ino, st.st_mode, st.st_nlink, 2000, 2000,
                                     st.st_size, int(st.st_atime), int(st.st_mtime), int(st.st_ctime))

    def _list(self, remote: str) -> bytes:
        out = b""
        folder = self._host_path(remote)
        for child in sorted(folder.iterdir()) if folder.is_dir() else []:
            st = self._real(os.path.join(remote, child.name)).stat()
            name = child.name.encode()
            out += b"DENT" + struct.pack("<4I", st.st_mode, st.st_size & 0xFFFFFFFF, int(st.st_mtime), len(name)) + name
        return out + b"DONE" + struct.pack("<4I", 0, 0, 0, 0)

    def _receive_file(self, stream: _Stream, spec: str) -> bytes:
        remote, _, mode_text = spec.rpartition(",")
        mode = int(mode_text) if mode_text.isdigit() else 0o644
        data = bytearray()
        while True:
            kind, length = struct.unpack("<4sI", stream.read_exact(8))
            if kind == b"DATA":
                data += stream.read_exact(length)
            elif kind == b"DONE":
                break
            else:
                return self._fail(f"unexpected {kind!r} in SEND")
        target = self._host_path(remote)
        if not target.parent.is_dir():
            return self._fail(f"secure_mkdirs failed: {os.path.dirname(remote)}: No such file or directory")
        key = os.path.normpath(remote)
        self._shadows.pop(key, None)
        if data[:4] == b"\x7fELF" and len(data) > 20 and struct.unpack_from("<H", data, 18)[0] == EM_AARCH64:
            elf = self.root / ".standin/elf" / hashlib.sha256(bytes(data)).hexdigest()
            elf.write_bytes(bytes(data))
            elf.chmod(0o755)
            self._shadows[key] = elf
            target.write_text(_ELF_SHIM.format(qemu=shutil.which(self.qemu) or self.qemu, sysroot=self.sysroot, elf=elf))
        else:
            target.write_bytes(bytes(data))
        target.chmod(stat.S_IMODE(mode) or 0o644)
        return b"OKAY" + struct.pack("<I", 0)

    def _send_file(self, stream: _Stream, remote: str) -> None:
        try:
            data = self._real(remote).read_bytes()
        except OSError as exc:
            stream.write(self._fail(f"open failed: {exc.strerror}"))
            return
        for start in range(0, len(data), SYNC_DATA_MAX):
            chunk = data[start:start + SYNC_DATA_MAX]
            stream.write(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
        stream.write(b"DONE" + struct.pack("<I", 0))


def wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()
