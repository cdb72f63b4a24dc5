"""Stands in for the service's builder and one device agent while a bisection is driven in-process
(`bisect.advance`), through the dispatcher's own functions: pending builds are finished with a
registered bundle (or failed, for commits said to be unbuildable), claimable jobs are claimed and
answered with paired result documents whose head runs `factor(sha)` times the base's `level`
(None: the case errors there), and completed. For store-level tests and the web UI's demo store, where no
compiler or device runs; the real builder and agent are in tests/e2e/test_bisect.py."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection

import sqlalchemy as sa
from sqlalchemy import Engine

from pipeline.config import AnalysisSettings
from pipeline.config import Settings
from pipeline.contracts import DeviceClass, DeviceInfo
from pipeline.orchestration.dispatch import bisect
from pipeline.results.store import builds, ingest, queue
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import Bisection, BuildRequest, Run
from tests.helpers import factories as f

LEVEL = 1e-3


def samples(level: float, rng: random.Random, n: int = 20) -> list[float]:
    return [level * (1 + rng.gauss(0, 0.003)) for _ in range(n)]


class StandInFarm:
    def __init__(self, engine: Engine, *, case: str, device_class: DeviceClass, base_sha: str, repository: str,
                 factor: Callable[[str], float | None], unbuildable: Collection[str] = (), target: str = f.TARGET,
                 agent: str = "bisect-agent", level: float = LEVEL) -> None:
        self.engine, self.case, self.device_class, self.base_sha = engine, case, device_class.name, base_sha
        self.repository, self.factor, self.unbuildable, self.target = repository, factor, set(unbuildable), target
        self.agent, self.uid, self.level = agent, f"{agent}-device", level
        self.rng = random.Random(2)
        self.jobs = 0
        with session_scope(engine) as s:
            queue.register_agent(s, name=agent, token_name="t", host="h", version="1", devices=[
                (device_class, DeviceInfo(device_class=device_class.name, uid=self.uid))])
            manifest = f.manifest(base_sha, [f.built_entry(case, target=target)], repository=repository)
            self.digest = ingest.ingest_manifest(s, manifest=manifest, path="/bundles/stand-in")

    def serve(self) -> int:
        """Finish pending builds and run every claimable job; how many jobs ran."""
        ran = 0
        with session_scope(self.engine) as s:
            for build in s.scalars(sa.select(BuildRequest).where(BuildRequest.status == "pending")).all():
                sha = s.get(Run, build.run_id).commit.sha  # type: ignore[union-attr]
                if sha in self.unbuildable:
                    builds.fail_build(s, build_id=build.id, error=f"build failed: {sha[:10]}: iree-compile: error")
                else:
                    builds.finish_build(s, build_id=build.id, digest=self.digest, base_digest=self.digest)
        while True:
            with session_scope(self.engine) as s:
                claimed = queue.claim_job(s, agent_name=self.agent, devices=[(self.uid, self.device_class)],
                                          lease_s=60)
                if claimed is None:
                    return ran
                factor = self.factor(claimed.commit)
                base = samples(self.level, self.rng)
                result = (f.paired_ok(self.case, self.base_sha, base, [b * factor for b in base], target=self.target,
                                      rounds=[4] * 5) if factor is not None
                          else f.failed(self.case, "error", target=self.target))
                ingest.ingest_result(s, document=f.result_document(
                    run_id=claimed.run_id, job_id=claimed.job_id, commit_sha=claimed.commit, results=[result],
                    device_class=self.device_class, repository=self.repository, uid=self.uid),
                    analysis=AnalysisSettings())
                queue.complete_job(s, job_id=claimed.job_id, agent_name=self.agent)
                ran += 1
                self.jobs += 1


def drive(engine: Engine, settings: Settings, farm: StandInFarm, bisection_id: int, rounds: int = 40) -> Bisection:
    """Advance the bisection and serve its jobs until it ends; the bisection, detached, steps loaded."""
    for _ in range(rounds):
        with session_scope(engine) as s:
            bisect.advance(s, settings, bisection_id)
        farm.serve()
        with session_scope(engine) as s:
            b = s.get(Bisection, bisection_id)
            assert b is not None
            if b.state not in ("queued", "running"):
                assert b.steps is not None   # loaded before the session closes
                s.expunge_all()
                return b
    raise AssertionError("the bisection did not end")
