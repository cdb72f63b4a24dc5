"""The service and an agent as two hosts: each in its own network namespace (made by this test
with `ip netns` and veth pairs, private addresses), the agent reaching the service only by its URL
and token. Between the namespaces: 10.231.N.0/24; this test process reaches the service over a
second link (10.232.N.0/24), which the agent's namespace has no route to."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.farm import Farm, wait_for
from tests.helpers.suite_repo import GemmCase, gemm_suite_files, make_suite_repo

pytestmark = pytest.mark.e2e


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, str, str, str]]:
    """(service namespace, agent namespace, service address for the agent, for this process)."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    n = os.getpid() % 250 + 1
    svc, agt = f"bf-svc-{os.getpid()}", f"bf-agt-{os.getpid()}"
    try:
        _ip("netns", "add", svc)
    except (RuntimeError, FileNotFoundError) as exc:
        pytest.skip(f"cannot make network namespaces here: {exc}")
    try:
        _ip("netns", "add", agt)
        _ip("link", "add", f"bfa{n}", "type", "veth", "peer", "name", f"bfb{n}")
        _ip("link", "set", f"bfa{n}", "netns", svc)
        _ip("link", "set", f"bfb{n}", "netns", agt)
        _ip("link", "add", f"bfr{n}", "type", "veth", "peer", "name", f"bfs{n}")
        _ip("link", "set", f"bfs{n}", "netns", svc)
        _ip("addr", "add", f"10.232.{n}.1/24", "dev", f"bfr{n}")
        _ip("link", "set", f"bfr{n}", "up")
        for ns, dev, addr in ((svc, f"bfa{n}", f"10.231.{n}.1/24"), (agt, f"bfb{n}", f"10.231.{n}.2/24"),
                              (svc, f"bfs{n}", f"10.232.{n}.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield svc, agt, f"10.231.{n}.1", f"10.232.{n}.2"
    finally:
        subprocess.run(["ip", "link", "del", f"bfr{n}"], capture_output=True)
        for ns in (svc, agt):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_an_agent_on_another_host_completes_a_run(two_hosts: tuple[str, str, str, str], tmp_path: Path) -> None:
    svc, agt, for_agent, for_test = two_hosts
    repo = make_suite_repo(tmp_path, gemm_suite_files([GemmCase("alpha", 16, 16, 16)]), name="suite-repo")
    farm = Farm(root=tmp_path, suite=repo / "kernels", host=for_test, listen="0.0.0.0",
                agent_url=f"http://{for_agent}:{{port}}", netns={"service": svc, "agent-remote": agt})
    farm.agent_url = farm.agent_url.format(port=farm.port)
    try:
        farm.service()
        unreachable = subprocess.run(["ip", "netns", "exec", agt, "python3", "-c",
                                      f"import socket; socket.create_connection(('{for_test}', {farm.port}), 2)"],
                                     capture_output=True, text=True, timeout=30)
        assert unreachable.returncode != 0   # the agent's host knows the service only by its own link
        farm.register_device_class()
        (job_id,) = farm.trigger()["jobs"].values()
        farm.agent("agent-remote")
        job = wait_for(lambda: (j := farm.job(job_id))["status"] in ("done", "failed") and j, 120, "the job to end")
    except AssertionError:
        raise AssertionError(farm.logs()) from None
    finally:
        farm.stop()
    assert job["status"] == "done" and job["agent"] == "agent-remote", (job, farm.logs())
    events = [e["event"] for e in farm.events("agent-remote")]
    assert "bundle_verified" in events and "uploaded" in events
    assert farm.query("SELECT COUNT(*) FROM case_results WHERE job_id = ?", job_id) == [(1,)]
