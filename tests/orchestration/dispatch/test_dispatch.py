"""The dispatcher's queue on both backends: registration, claims, leases, requeues, outcomes, and
concurrent claims from many threads (each job claimed exactly once)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.contracts import DeviceInfo
from pipeline.results.store import ingest, queue
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import Device, Job, utcnow

from tests.helpers import factories as f

OTHER = "other-cpu"


def _info(uid: str, device_class: str = f.DEVICE_CLASS) -> DeviceInfo:
    return DeviceInfo(device_class=device_class, uid=uid, name="test cpu", host="h")


def _register(engine: Engine, name: str, *uids: str, device_class: str = f.DEVICE_CLASS) -> None:
    with session_scope(engine) as s:
        queue.register_agent(s, name=name, token_name="t", host="h", version="1",
                             devices=[(f.device_class(device_class), _info(u, device_class)) for u in uids])


def _queue(engine: Engine, n: int = 1, *, device_class: str = f.DEVICE_CLASS, max_attempts: int = 2,
           digest: str | None = "d" * 64) -> list[str]:
    ids = []
    with session_scope(engine) as s:
        for _ in range(n):
            run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(1), kind="adhoc", device_classes=[device_class])
            for job in run.jobs:
                job.bundle_digest, job.max_attempts = digest, max_attempts
                ids.append(job.id)
    return ids


def _claim(engine: Engine, agent: str, uid: str = "dev-1", device_class: str = f.DEVICE_CLASS,
           lease_s: float = 60, now=None) -> queue.ClaimedJob | None:  # type: ignore[no-untyped-def]
    with session_scope(engine) as s:
        return queue.claim_job(s, agent_name=agent, devices=[(uid, device_class)], lease_s=lease_s, now=now)


def test_a_claim_takes_the_oldest_claimable_job_of_the_agents_classes(seeded: Engine) -> None:
    _register(seeded, "a1", "dev-1")
    waiting = _queue(seeded, digest=None)            # no bundle yet: not claimable
    other = _queue(seeded, device_class=OTHER)       # a class the agent lacks
    first, second = _queue(seeded, 2)
    claimed = _claim(seeded, "a1")
    assert claimed is not None and claimed.job_id == first and claimed.attempt == 1
    assert claimed.commit == f.sha(1) and claimed.device_uid == "dev-1" and claimed.bundle_digest == "d" * 64
    assert _claim(seeded, "a1").job_id == second  # type: ignore[union-attr]
    assert _claim(seeded, "a1") is None
    with session_scope(seeded) as s:
        rows = {j.id: j for j in queue.list_jobs(s)}
    assert rows[first].status == "running" and rows[first].agent == "a1" and rows[first].device_uid == "dev-1"
    assert rows[waiting[0]].waiting_for == "build (None)" and rows[other[0]].waiting_for == "an agent"


def test_an_unknown_agent_is_refused(seeded: Engine) -> None:
    with pytest.raises(queue.DispatchError, match="unknown agent"):
        _claim(seeded, "nobody")


def test_heartbeat_renews_leases_and_reports_lost_jobs(seeded: Engine) -> None:
    _register(seeded, "a1", "dev-1")
    (job_id,) = _queue(seeded)
    start = utcnow()
    _claim(seeded, "a1", lease_s=10, now=start)
    with session_scope(seeded) as s:
        lost = queue.heartbeat(s, agent_name="a1", device_uids=["dev-1"], running=[job_id, "gone"], lease_s=10,
                               now=start + timedelta(seconds=8))
    assert lost == ["gone"]
    with session_scope(seeded) as s:   # renewed: not expired 12 s after the claim
        assert queue.requeue_expired(s, now=start + timedelta(seconds=12)) == []
        assert queue.requeue_expired(s, now=start + timedelta(seconds=19)) == [(job_id, "queued")]


def test_expired_leases_requeue_until_max_attempts_then_fail(seeded: Engine) -> None:
    _register(seeded, "a1", "dev-1")
    _register(seeded, "a2", "dev-2")
    (job_id,) = _queue(seeded, max_attempts=2)
    now = utcnow()
    _claim(seeded, "a1", lease_s=1, now=now)
    with session_scope(seeded) as s:
        assert queue.requeue_expired(s, now=now + timedelta(seconds=2)) == [(job_id, "queued")]
        assert "lease of agent a1 expired" in (s.get(Job, job_id).error or "")  # type: ignore[union-attr]
    claimed = _claim(seeded, "a2", "dev-2", lease_s=1, now=now + timedelta(seconds=3))
    assert claimed is not None and claimed.attempt == 2
    with session_scope(seeded) as s:
        assert queue.requeue_expired(s, now=now + timedelta(seconds=5)) == [(job_id, "failed")]
        job = s.get(Job, job_id)
        assert job is not None and job.status == "failed" and job.error == "lease expired 2 times: last agent a2"
        assert job.run.status == "failed"


def test_only_the_lease_holder_ends_a_job(seeded: Engine) -> None:
    _register(seeded, "a1", "dev-1")
    _register(seeded, "a2", "dev-2")
    (job_id,) = _queue(seeded)
    now = utcnow()
    _claim(seeded, "a1", lease_s=1, now=now)
    with session_scope(seeded) as s:
        queue.requeue_expired(s, now=now + timedelta(seconds=2))
    _claim(seeded, "a2", "dev-2")
    with pytest.raises(queue.LeaseLost, match="no longer holds"), session_scope(seeded) as s:
        queue.complete_job(s, job_id=job_id, agent_name="a1")
    with session_scope(seeded) as s:
        assert queue.complete_job(s, job_id=job_id, agent_name="a2").status == "done"
    with session_scope(seeded) as s:   # idempotent: a re-sent completion
        assert queue.complete_job(s, job_id=job_id, agent_name="a2").status == "done"
        assert s.get(Job, job_id).run.status == "done"  # type: ignore[union-attr]


def test_a_requeued_unclaimed_job_is_still_completed_by_its_late_agent(seeded: Engine) -> None:
    _register(seeded, "a1", "dev-1")
    (job_id,) = _queue(seeded)
    now = utcnow()
    _claim(seeded, "a1", lease_s=1, now=now)
    with session_scope(seeded) as s:
        queue.requeue_expired(s, now=now + timedelta(seconds=2))
        assert queue.complete_job(s, job_id=job_id, agent_name="a1").status == "done"


def test_fail_records_the_reason(seeded: Engine) -> None:
    _register(seeded, "a1", "dev-1")
    (job_id,) = _queue(seeded)
    _claim(seeded, "a1")
    with session_scope(seeded) as s:
        job = queue.fail_job(s, job_id=job_id, agent_name="a1", reason="bundle refused: sha256 mismatch")
        assert job.status == "failed" and job.error == "bundle refused: sha256 mismatch" and job.lease_expires_at is None


def test_presence_follows_registration_heartbeats_and_silence(seeded: Engine) -> None:
    _register(seeded, "a1", "dev-1", "dev-2")
    with session_scope(seeded) as s:
        queue.heartbeat(s, agent_name="a1", device_uids=["dev-1"], running=[], lease_s=60)
    with session_scope(seeded) as s:
        assert dict(s.execute(sa.select(Device.uid, Device.online)).all()) == {"dev-1": True, "dev-2": False}
        assert queue.mark_silent_agents_offline(s, silent_s=5, now=utcnow() + timedelta(seconds=10)) == ["a1"]
    with session_scope(seeded) as s:
        assert not any(s.scalars(sa.select(Device.online)))
        queue.heartbeat(s, agent_name="a1", device_uids=["dev-1", "dev-2"], running=[], lease_s=60)
    with session_scope(seeded) as s:
        assert all(s.scalars(sa.select(Device.online)))


def test_extend_leases_after_a_service_restart(seeded: Engine) -> None:
    _register(seeded, "a1", "dev-1")
    _queue(seeded)
    now = utcnow()
    _claim(seeded, "a1", lease_s=1, now=now - timedelta(seconds=30))
    with session_scope(seeded) as s:
        assert queue.extend_leases(s, lease_s=10, now=now) == 1
        assert queue.requeue_expired(s, now=now + timedelta(seconds=5)) == []


def test_concurrent_claims_take_each_job_exactly_once(seeded: Engine) -> None:
    agents = [f"agent-{i}" for i in range(6)]
    for i, name in enumerate(agents):
        _register(seeded, name, f"dev-{i}")
    jobs = set(_queue(seeded, 30))
    taken: dict[str, list[str]] = {name: [] for name in agents}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(agents))

    def work(i: int, name: str) -> None:
        try:
            barrier.wait()
            while (claimed := _claim(seeded, name, f"dev-{i}")) is not None:
                taken[name].append(claimed.job_id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, n)) for i, n in enumerate(agents)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    claimed = [j for ids in taken.values() for j in ids]
    assert sorted(claimed) == sorted(jobs)          # every job once, none twice
    with session_scope(seeded) as s:
        assert set(s.scalars(sa.select(Job.attempts).where(Job.id.in_(jobs)))) == {1}


def test_a_build_whose_builder_went_silent_is_queued_again(seeded: Engine) -> None:
    """`requeue_silent_builds`: a build whose heartbeat (or, from before heartbeats, whose start) is
    older than the lease goes back to pending; one renewed within it, and finished ones, stay."""
    from pipeline.results.store.builds import requeue_silent_builds
    from pipeline.results.store.models import BuildRequest

    now = utcnow()
    with session_scope(seeded) as s:
        runs = [ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(i), kind="adhoc",
                                  device_classes=[f.DEVICE_CLASS]).id for i in range(4)]
        old, recent = now - timedelta(seconds=120), now - timedelta(seconds=5)
        s.add_all([
            BuildRequest(run_id=runs[0], targets=["llvm-cpu:x86_64"], status="building", started_at=old, heartbeat_at=old),
            BuildRequest(run_id=runs[1], targets=["llvm-cpu:x86_64"], status="building", started_at=old, heartbeat_at=recent),
            BuildRequest(run_id=runs[2], targets=["llvm-cpu:x86_64"], status="building", started_at=old),
            BuildRequest(run_id=runs[3], targets=["llvm-cpu:x86_64"], status="done", started_at=old, heartbeat_at=old),
        ])
    with session_scope(seeded) as s:
        requeued = requeue_silent_builds(s, silent_s=60)
    assert sorted(run for _, run in requeued) == sorted([runs[0], runs[2]])
    with session_scope(seeded) as s:
        rows = {r.run_id: (r.status, r.started_at, r.heartbeat_at) for r in s.scalars(sa.select(BuildRequest))}
    assert rows[runs[0]] == ("pending", None, None) and rows[runs[2]] == ("pending", None, None)
    assert rows[runs[1]][0] == "building" and rows[runs[3]][0] == "done"


def test_heartbeats_keep_the_progress_of_the_jobs_the_agent_holds(seeded: Engine) -> None:
    """What a running job is doing (`JobRow.progress`) comes from its agent's heartbeat; another
    agent's word about it is ignored, a new claim starts without one, a finished job shows none."""
    _register(seeded, "a1", "dev-1")
    _register(seeded, "a2", "dev-2")
    (job_id,) = _queue(seeded, max_attempts=3)
    assert _claim(seeded, "a1") is not None
    with session_scope(seeded) as s:
        queue.heartbeat(s, agent_name="a1", device_uids=["dev-1"], running=[job_id], lease_s=60,
                        progress={job_id: "timing: round 2/8 gemm/x (12/80)"})
        queue.heartbeat(s, agent_name="a2", device_uids=["dev-2"], running=[], lease_s=60,
                        progress={job_id: "not mine"})
    with session_scope(seeded) as s:
        assert queue.get_job(s, job_id).progress == "timing: round 2/8 gemm/x (12/80)"  # type: ignore[union-attr]
        assert queue.requeue_expired(s, now=utcnow() + timedelta(seconds=120))   # a1 went silent
    assert _claim(seeded, "a2", uid="dev-2") is not None
    with session_scope(seeded) as s:
        assert queue.get_job(s, job_id).progress is None  # type: ignore[union-attr]
        ingest.set_job_status(s, job_id=job_id, status="done")
        assert queue.get_job(s, job_id).progress is None  # type: ignore[union-attr]


def test_local_jobs_whose_process_is_gone_are_failed_and_the_others_kept(seeded: Engine) -> None:
    import socket
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    _register(seeded, "a1", "dev-1")
    with session_scope(seeded) as s:
        def local(owner: str | None, status: str) -> str:
            run = ingest.create_run(s, repository=f.REPO, commit_sha=f.sha(1), kind="local",
                                    device_classes=[f.DEVICE_CLASS], owner=owner)
            ingest.set_job_status(s, job_id=run.jobs[0].id, status=status)
            return run.jobs[0].id

        dead_running = local(f"{host}:{gone.pid}:1", "running")
        dead_queued = local(f"{host}:{gone.pid}:1", "queued")
        alive = local(queue.local_owner(), "running")
        reused_pid = local(queue.local_owner().rsplit(":", 1)[0] + ":0", "running")   # our pid, another start
        elsewhere = local(f"another-{host}:{gone.pid}:1", "running")
        unowned = local(None, "running")   # kept by a benchfarm run before owners were recorded
    leased = _queue(seeded)[0]
    _claim(seeded, "a1")
    with session_scope(seeded) as s:
        reaped = queue.reap_orphaned_local_jobs(s)
    assert sorted(reaped) == sorted([dead_running, dead_queued, reused_pid, unowned])
    with session_scope(seeded) as s:
        status = {j.id: (j.status, j.error) for j in s.scalars(sa.select(Job))}
    assert {status[j][0] for j in reaped} == {"failed"}
    assert "ended without finishing it" in (status[dead_running][1] or "")
    assert status[alive][0] == status[elsewhere][0] == status[leased][0] == "running"
