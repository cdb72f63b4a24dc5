"""A store with history worth looking at, for the web UI's tests, screenshots and latency bench.

`build(engine, ...)`: a repository with a GitHub URL, `commits` default-branch commits, cases of a
few families (Triton and IREE implementations, and the vendor control of each GEMM shape) on
`device_classes`; one push run per commit with every case, samples around a level with 0.5%
noise; every third suite case steps up 15% (a regression) at 60% of the history and every fifth
one steps down 12% (an improvement) at 30% of it, the control staying flat; the history is then
analysed once. A pull request (#7, branch `feature`) off the newest commit slows the first GEMM by
10%. Bundles carry FLOPs and bytes, so the roofline has points. With `unmeasured` commits, the
first regressed case has no results there (its change point then spans a range: `add_bisection`
bisects it). Hardware counters: on the GPU class, every suite case's result carries
them (a regressed case executes 12 % more instructions and reads 15 % more DRAM bytes from its step
on; DRAM bytes and the L2 hit rate jitter within their tolerance); the vendor controls and the CPU
class have none, and say why (as an agent's results do).
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from pipeline.config import AnalysisSettings, Settings
from pipeline.contracts import BundleEntry, CaseResult, CommitInfo, DeviceClass
from pipeline.contracts.counters import COUNTERS_KEY, HardwareCounters
from pipeline.results.store import analysis, ingest
from pipeline.results.store.db import session_scope
from pipeline.results.analysis.stats import summarize
from tests.helpers import factories as f

REPO = "example/kernels"
REPO_URL = "https://github.com/example/kernels"
T0 = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
EVIL_MESSAGE = '<script>window.__xss = 1</script> speed up <img src=x onerror="window.__xss = 2">'
FAMILIES = {
    # family: (shapes, dtype, impls, flops(shape), bytes(shape))
    "gemm": (["1024x1024x1024", "4096x4096x4096", "8192x1024x4096"], "bf16", ["triton", "iree"]),
    "conv": (["1x64x56x56", "1x128x28x28"], "f16", ["triton", "iree"]),
    "attention": (["b4-h32-s2048-d128", "b1-h8-s8192-d64"], "bf16", ["triton"]),
}


def main_sha(i: int) -> str:
    return f.sha(f"demo-main-{i}")


@dataclass
class Demo:
    cases: list[str] = field(default_factory=list)
    device_classes: list[str] = field(default_factory=list)
    commits: int = 0
    pr_head: str = ""
    regressed: list[str] = field(default_factory=list)
    farm: DemoFarm | None = None
    """set by `add_farm`"""


def _cases(scale: int) -> list[str]:
    out = []
    for family, (shapes, dtype, impls) in FAMILIES.items():
        for k in range(scale):
            for shape in shapes:
                name = f"{family}-{k}" if scale > 1 else f"{family}-main"
                for impl in impls:
                    out.append(f"{family}/{name}/{shape}/{dtype}/{impl}")
                if family == "gemm":
                    out.append(f"{family}/{name}/{shape}/{dtype}/vendor")
    return out


def _work(case: str) -> tuple[int, int]:
    dims = [int(x) for x in case.split("/")[2].replace("b", "").replace("h", "").replace("s", "").replace("d", "")
            .replace("-", "x").split("x") if x.isdigit()]
    size = 1
    for d in dims:
        size *= d
    if case.startswith("gemm"):
        m, n, k = dims
        return 2 * m * n * k, 2 * (m * k + k * n + m * n)
    return 2 * size * 9, 4 * size


def _level(case: str, index: int) -> float:
    flops, _ = _work(case)
    return max(flops / 4e13, 2e-6) * (1.3 if case.endswith("/iree") else 1.0)


def device_class(name: str) -> DeviceClass:
    return DeviceClass(name=name, kind="gpu" if "h100" in name or "mi300" in name else "cpu", targets=[f.TARGET],
                       runtime="iree", hal_driver="local-sync", description=f"{name} (demo)")


NO_PERF = "refused: perf_event_open: instructions (kernel.perf_event_paranoid=3; user-space counting needs <= 2)"
VENDOR = "not available: a vendor control runs the host's library (several kernels a call); not profiled"


def _counters(case: str, stepped: bool, rng: random.Random) -> HardwareCounters:
    """What ncu would count over one launch of the case's kernel: instructions exact, DRAM bytes and the
    L2 hit rate a little apart between readings (within their tolerance), more of both after a step."""
    flops, nbytes = _work(case)
    more = 1.12 if stepped else 1.0
    return HardwareCounters(profiler="ncu 2025.3.1.0", values={
        "instructions": float(round(flops / 512 * more)), "dram_read_bytes": nbytes * 0.7 * (1.15 if stepped else 1.0)
        * (1 + rng.uniform(0, 0.003)), "dram_write_bytes": nbytes * 0.3 * (1 + rng.uniform(0, 0.003)),
        "l2_hit_rate": 62.0 + rng.uniform(-2, 2), "achieved_occupancy": 48.0 + rng.uniform(-0.1, 0.1)})


def build(engine: Engine, *, commits: int = 30, scale: int = 1, samples: int = 12,
          device_classes: tuple[str, ...] = ("nvidia-h100-sxm", "cpu-x86-64"), evil: bool = True,
          unmeasured: Collection[int] = ()) -> Demo:
    demo = Demo(cases=_cases(scale), device_classes=list(device_classes), commits=commits)
    suite = [c for c in demo.cases if not c.endswith("/vendor")]
    step_up = {c for i, c in enumerate(suite) if i % 3 == 0}
    step_down = {c for i, c in enumerate(suite) if i % 5 == 2} - step_up
    demo.regressed = sorted(step_up)
    with session_scope(engine) as s:
        ingest.upsert_repository(s, name=REPO, url=REPO_URL)
        infos = []
        for i in range(commits):
            message = EVIL_MESSAGE if evil and i == commits // 2 else f"kernels: change {i}\n\nbody of change {i}"
            infos.append(CommitInfo(sha=main_sha(i), parents=[main_sha(i - 1)] if i else [], message=message,
                                    author="dev <dev@example.com>", committed_at=T0 + timedelta(hours=i),
                                    branch="main"))
        infos.append(CommitInfo(sha=f.sha("demo-pr"), parents=[main_sha(commits - 1)], message="gemm: try a wider tile",
                                author="dev <dev@example.com>", committed_at=T0 + timedelta(hours=commits),
                                branch="feature", pull_request=7))
        ingest.record_commits(s, repository=REPO, commits=infos)
        for dc in device_classes:
            ingest.upsert_device_class(s, device_class(dc))
        entries = []
        for case in demo.cases:
            flops, nbytes = _work(case)
            entry = f.built_entry(case)
            entries.append(BundleEntry.model_validate({**entry.model_dump(), "flops": flops, "bytes": nbytes}))
        ingest.ingest_manifest(s, manifest=f.manifest(main_sha(0), entries, repository=REPO), path="/bundles/demo")
    rng = random.Random(7)
    counter_rng = random.Random(11)   # its own: the timings stay those of a store without counters

    def results(i: int, dc_index: int, pr: bool = False) -> list[CaseResult]:
        out = []
        for case in demo.cases:
            if i in unmeasured and case == demo.regressed[0]:
                continue
            level = _level(case, i) * (1 + 0.4 * dc_index)
            if case in step_up and i >= int(commits * 0.6):
                level *= 1.15
            if case in step_down and i >= int(commits * 0.3):
                level *= 0.88
            if pr and case == demo.cases[0]:
                level *= 1.10
            drift = rng.gauss(0, 0.003)
            values = [level * (1 + drift + rng.gauss(0, 0.005)) for _ in range(samples)]
            gpu = device_class(sorted(device_classes)[dc_index]).kind == "gpu"
            counted = (_counters(case, case in step_up and i >= int(commits * 0.6), counter_rng)
                       if gpu and not case.endswith("/vendor") else None)
            note = f"{counted.profiler}: taken on the check's inputs" if counted is not None else VENDOR if gpu else NO_PERF
            out.append(CaseResult(case=case, target=f.TARGET, status="ok", samples=values, stats=summarize(values),
                                  counters=counted, environment={COUNTERS_KEY: note}))
        return out

    for i in range(commits):
        with session_scope(engine) as s:
            run = ingest.create_run(s, repository=REPO, commit_sha=main_sha(i), kind="push",
                                    device_classes=list(device_classes))
            for dc_index, job in enumerate(sorted(run.jobs, key=lambda j: j.device_class.name)):
                document = f.result_document(run_id=run.id, job_id=job.id, commit_sha=main_sha(i), repository=REPO,
                                             results=results(i, dc_index), device_class=job.device_class.name)
                ingest.ingest_result(s, document=document, analysis=None)
                ingest.set_job_status(s, job_id=job.id, status="done")
    with session_scope(engine) as s:
        analysis.reanalyze_all(s, AnalysisSettings())
        run = ingest.create_run(s, repository=REPO, commit_sha=f.sha("demo-pr"), kind="pr",
                                device_classes=list(device_classes))
        for dc_index, job in enumerate(sorted(run.jobs, key=lambda j: j.device_class.name)):
            document = f.result_document(run_id=run.id, job_id=job.id, commit_sha=f.sha("demo-pr"), repository=REPO,
                                         results=results(commits, dc_index, pr=True), device_class=job.device_class.name)
            ingest.ingest_result(s, document=document, analysis=None)
            ingest.set_job_status(s, job_id=job.id, status="done")
    demo.pr_head = f.sha("demo-pr")
    if evil:
        add_evil_case(engine, device_classes[0])
    return demo


EVIL_CASE = 'gemm/<img src=x onerror="window.__xss=3">/1x1x1/f32/triton'


def add_evil_case(engine: Engine, device_class_name: str) -> None:
    """A case id holding HTML, written straight into the store (the contract would refuse it):
    the pages must show it as text."""

    from pipeline.results.store.models import Case, DeviceClassRow, Series

    with session_scope(engine) as s:
        case = Case(case_id=EVIL_CASE, family="gemm", name='<img src=x onerror="window.__xss=3">', shape="1x1x1",
                    dtype="f32", impl="triton", model="")
        s.add(case)
        s.flush()
        dc_id = s.scalar(sa.select(DeviceClassRow.id).where(DeviceClassRow.name == device_class_name))
        s.add(Series(case_id=case.id, device_class_id=dc_id, metric="latency"))


EVIL_ERROR = '<script>window.__xss = 4</script> device lost: CUDA_ERROR_LAUNCH_FAILED'


@dataclass
class DemoFarm:
    agents: list[str] = field(default_factory=list)
    running_job: str = ""
    waiting_job: str = ""
    failed_job: str = ""


def add_farm(engine: Engine, demo: Demo) -> DemoFarm:
    """Agents and jobs for the devices and jobs pages: `gpu-box-1` online with two H100s, one of them
    running an ad-hoc job of the newest commit; `cpu-box` offline; a run waiting for its build; a
    failed job whose error holds HTML (shown as text)."""
    from pipeline.contracts import DeviceInfo
    from pipeline.orchestration.dispatch import triggers
    from pipeline.results.store import builds, queue
    from pipeline.results.store.models import Agent

    gpu, cpu = demo.device_classes[0], demo.device_classes[-1]
    farm = DemoFarm(agents=["gpu-box-1", "cpu-box"])
    newest = main_sha(demo.commits - 1)
    with session_scope(engine) as s:
        queue.register_agent(s, name="gpu-box-1", token_name="agent-token", host="gpu-box-1.lab", version="0.1.0",
                             devices=[(device_class(gpu), DeviceInfo(device_class=gpu, uid=f"GPU-{i}a2f-0000",
                                                                        name="NVIDIA H100 80GB HBM3", host="gpu-box-1.lab"))
                                         for i in range(2)])
        queue.register_agent(s, name="cpu-box", token_name="agent-token", host="cpu-box.lab", version="0.1.0",
                             devices=[(device_class(cpu), DeviceInfo(device_class=cpu, uid="cpu-box-x86",
                                                                        name="AMD EPYC 9654", host="cpu-box.lab"))])
        queue.heartbeat(s, agent_name="cpu-box", device_uids=[], running=[], lease_s=60)  # its device gone
        s.execute(sa.update(Agent).where(Agent.name == "cpu-box").values(state="offline"))
        running = triggers.queue_run(s, repository=REPO, commit_sha=newest, device_classes=[gpu], cases="gemm/*",
                                     max_attempts=3)
        builds.finish_build(s, build_id=_build_id(s, running.run_id), digest=_bundle_digest(s))
        claimed = queue.claim_job(s, agent_name="gpu-box-1", devices=[("GPU-0a2f-0000", gpu)], lease_s=600)
        assert claimed is not None
        farm.running_job = claimed.job_id
        waiting = triggers.queue_run(s, repository=REPO, commit_sha=demo.pr_head, device_classes=[gpu, cpu], cases=None,
                                     max_attempts=3)
        farm.waiting_job = waiting.job_ids[cpu]
        failed = triggers.queue_run(s, repository=REPO, commit_sha=main_sha(demo.commits - 2), device_classes=[gpu],
                                    cases=None, max_attempts=1)
        builds.finish_build(s, build_id=_build_id(s, failed.run_id), digest=_bundle_digest(s))
        job = queue.claim_job(s, agent_name="gpu-box-1", devices=[("GPU-1a2f-0000", gpu)], lease_s=600)
        assert job is not None
        queue.fail_job(s, job_id=job.job_id, agent_name="gpu-box-1", reason=EVIL_ERROR)
        farm.failed_job = job.job_id
    demo.farm = farm
    return farm


def _build_id(session: Session, run_id: str) -> int:
    from pipeline.results.store.models import BuildRequest

    return session.execute(sa.select(BuildRequest.id).where(BuildRequest.run_id == run_id)).scalar_one()


def _bundle_digest(session: Session) -> str:
    from pipeline.results.store.models import Bundle

    return str(session.scalar(sa.select(Bundle.digest).limit(1)))


@dataclass
class DemoBisection:
    change_point_id: int
    bisection_id: int
    series_id: int
    culprit: str
    unbuildable: str


def add_bisection(engine: Engine, demo: Demo, settings: Settings, *, unmeasured: Collection[int]) -> DemoBisection:
    """Bisect the first regressed case's change point on the first device class (built with
    `unmeasured` commits, so that its range spans them) against the stand-in builder and agent:
    the step is at 60 % of the history, the middle commit of the range cannot be built."""
    from pipeline.orchestration.dispatch import bisect
    from pipeline.results.store.models import Case, ChangePoint, Commit, DeviceClassRow, Series
    from tests.helpers.bisect_standin import StandInFarm, drive

    step = int(demo.commits * 0.6)
    index = {main_sha(i): i for i in range(demo.commits)}
    middle = sorted(unmeasured)[len(unmeasured) // 2]
    case, dc = demo.regressed[0], demo.device_classes[0]
    with session_scope(engine) as s:
        cp = s.scalars(sa.select(ChangePoint).join(Series, ChangePoint.series_id == Series.id)
                       .join(Commit, ChangePoint.after_commit_id == Commit.id)
                       .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
                       .join(Case, Series.case_id == Case.id)
                       .where(Commit.sha == main_sha(step), DeviceClassRow.name == dc, Case.case_id == case,
                              ChangePoint.lifecycle == "confirmed", ChangePoint.direction == "regression")).first()
        assert cp is not None, "the demo's regression was not confirmed"
        cp_id, series_id = cp.id, cp.series_id
        base = s.scalar(sa.select(Commit.sha).where(Commit.id == cp.before_commit_id))
        level = cp.before_level
        bisection_id = bisect.request_bisection(s, settings, change_point_id=cp_id, who="ada").id
    farm = StandInFarm(engine, case=case, device_class=device_class(dc), base_sha=str(base), repository=REPO,
                       factor=lambda sha: 1.15 if index[sha] >= step else 1.0, unbuildable={main_sha(middle)},
                       level=level)
    drive(engine, settings, farm, bisection_id)
    return DemoBisection(cp_id, bisection_id, series_id, main_sha(step), main_sha(middle))


CONTROL = "gemm/gemm-main/1024x1024x1024/bf16/vendor"
"""A flat series of the demo (the vendor control of the first GEMM shape)."""


def extend_history(engine: Engine, demo: Demo, factors: list[float], *, case: str = CONTROL) -> list[str]:
    """Push commits after the demo's newest default-branch commit (one push run each, on the last
    device class, `case` only, at its level times each factor), analysed as they arrive like any
    upload; their shas. Called again, it goes on after the commits it added."""
    dc = demo.device_classes[-1]
    dc_index = sorted(demo.device_classes).index(dc)
    start = demo.commits
    shas = [main_sha(start + k) for k in range(len(factors))]
    rng = random.Random(start)
    with session_scope(engine) as s:
        ingest.record_commits(s, repository=REPO, commits=[
            CommitInfo(sha=sha, parents=[main_sha(start + k - 1)], message=f"kernels: change {start + k}",
                       author="dev <dev@example.com>", committed_at=T0 + timedelta(hours=start + k), branch="main")
            for k, sha in enumerate(shas)])
    for sha, factor in zip(shas, factors, strict=True):
        level = _level(case, 0) * (1 + 0.4 * dc_index) * factor
        values = [level * (1 + rng.gauss(0, 0.003)) for _ in range(12)]
        with session_scope(engine) as s:
            run = ingest.create_run(s, repository=REPO, commit_sha=sha, kind="push", device_classes=[dc])
            (job,) = run.jobs
            document = f.result_document(run_id=run.id, job_id=job.id, commit_sha=sha, repository=REPO,
                                         results=[CaseResult(case=case, target=f.TARGET, status="ok", samples=values,
                                                             stats=summarize(values))], device_class=dc)
            ingest.ingest_result(s, document=document, analysis=AnalysisSettings())
            ingest.set_job_status(s, job_id=job.id, status="done")
    demo.commits += len(factors)
    return shas
