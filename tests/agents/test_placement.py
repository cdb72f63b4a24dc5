"""The job's plan of buffer copies per case (`pipeline.agents.placement`), on sizes worked by hand."""

from __future__ import annotations

from pipeline.agents.placement import plan_placements
from pipeline.config import MeasurementSettings

MiB = 1 << 20


def settings(per_case: int = 256 * MiB, total: int | None = None, placements: int = 4) -> MeasurementSettings:
    return MeasurementSettings(placements=placements, placement_bytes=per_case, placement_total_bytes=total)


def test_without_a_job_budget_each_case_keeps_within_its_own() -> None:
    assert plan_placements([10 * MiB, 100 * MiB, 1024 * MiB], settings()) == [4, 2, 1]   # never under one


def test_a_job_budget_raises_the_cases_left_on_few_copies_evenly() -> None:
    # per case: [4, 2, 1, 1] = 40 + 200 + 300 + 1024 = 1564 MiB. Within 2400: the 300 MiB case a second copy
    # (1864; the 1 GiB one's would make 2888), then a third for 100 and 300 (1964, 2264), a fourth for 100
    # (2364); the 1 GiB case stays on one, the budget has no room for it. Within 2900 both big ones get a
    # second (2888) and nothing more fits
    assert plan_placements([10 * MiB, 100 * MiB, 300 * MiB, 1024 * MiB], settings(total=2400 * MiB)) == [4, 4, 3, 1]
    assert plan_placements([10 * MiB, 100 * MiB, 300 * MiB, 1024 * MiB], settings(total=2900 * MiB)) == [4, 2, 2, 2]
    # with room for everything, everything gets the full count
    assert plan_placements([10 * MiB, 100 * MiB, 300 * MiB, 1024 * MiB], settings(total=8 * 1024 * MiB)) == [4] * 4
    # two before three: 3 x 600 MiB at one copy each (1800); within 2400 only one can have a second
    assert plan_placements([600 * MiB] * 3, settings(total=2400 * MiB)) == [2, 1, 1]
    assert plan_placements([600 * MiB] * 3, settings(total=3600 * MiB)) == [2, 2, 2]


def test_a_job_over_its_budget_gives_copies_back_from_its_largest_cases() -> None:
    # per case: [4, 4] at 200 and 100 MiB = 1200 MiB; within 700 the larger one gives copies back first
    # (1000, 800, 600) and the smaller keeps its four
    assert plan_placements([200 * MiB, 100 * MiB], settings(per_case=1024 * MiB, total=700 * MiB)) == [1, 4]
    # nothing goes under one copy, even when one copy each is over the budget
    assert plan_placements([200 * MiB, 100 * MiB], settings(per_case=1024 * MiB, total=10 * MiB)) == [1, 1]


def test_the_gpu_default_gives_every_case_of_the_cuda_suite_two_copies_at_least() -> None:
    from pipeline.build.suite_loader import load_suite
    from pipeline.contracts import Target

    gpu = MeasurementSettings().for_device("nvidia-h100", "gpu")
    cuda = Target.parse("cuda:sm_90")
    sizes = [sum(t.nbytes for t in c.tensors) for c in load_suite("kernels") if c.supports(cuda)]
    plan = plan_placements(sizes, gpu)
    assert len(sizes) > 100 and max(sizes) > gpu.placement_bytes   # the suite has cases over the per-case budget
    assert min(plan) >= 2, sorted(zip(plan, sizes))[:5]
    assert gpu.placement_total_bytes is not None
    assert sum(c * s for c, s in zip(plan, sizes)) <= gpu.placement_total_bytes
