"""The job's plan of buffer copies per case (`pipeline.agents.placement`), on sizes worked by hand."""

from __future__ import annotations

from pipeline.agents.measure import for_device
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

    gpu = for_device(MeasurementSettings(), "nvidia-h100", "gpu")
    cuda = Target.parse("cuda:sm_90")
    sizes = [sum(t.nbytes for t in c.tensors) for c in load_suite("kernels") if c.supports(cuda)]
    plan = plan_placements(sizes, gpu)
    assert len(sizes) > 100 and max(sizes) > gpu.placement_bytes   # the suite has cases over the per-case budget
    assert min(plan) >= 2, sorted(zip(plan, sizes))[:5]
    assert gpu.placement_total_bytes is not None
    assert sum(c * s for c, s in zip(plan, sizes)) <= gpu.placement_total_bytes


def test_the_job_budget_keeps_within_a_share_of_the_device_memory_free() -> None:
    from pipeline.agents.placement import job_budget

    gpu = for_device(MeasurementSettings(), "nvidia-l4", "gpu")
    assert gpu.placement_total_bytes == 40 << 30
    assert job_budget(gpu) == job_budget(gpu, free_bytes=None) == 40 << 30    # the runner cannot tell: as set
    assert job_budget(gpu, free_bytes=79 << 30) == 40 << 30                    # an 80 GiB H100: the 40 GiB hold
    l4_free = 22 << 30
    assert job_budget(gpu, free_bytes=l4_free) == int(0.6 * l4_free)          # a 24 GiB L4: 13.2 GiB
    assert job_budget(settings(), free_bytes=l4_free) is None                  # no job budget: per case only
    # [4, 4] at 200 and 100 MiB = 1200 MiB; 1 GiB free gives 614 MiB: the larger case goes down to one copy
    plan = plan_placements([200 * MiB, 100 * MiB], settings(per_case=1024 * MiB, total=8 << 30), free_bytes=1024 * MiB)
    assert plan == [1, 4]


def test_the_cuda_suite_on_smaller_gpus_keeps_its_copies_within_the_share() -> None:
    from pipeline.build.suite_loader import load_suite
    from pipeline.contracts import Target

    gpu = for_device(MeasurementSettings(), "nvidia-l40s", "gpu")
    cuda = Target.parse("cuda:sm_90")
    sizes = [sum(t.nbytes for t in c.tensors) for c in load_suite("kernels") if c.supports(cuda)]
    on_h100 = plan_placements(sizes, gpu, free_bytes=79 << 30)
    assert on_h100 == plan_placements(sizes, gpu)                # 0.6 x 79 GiB is over 40 GiB: as set
    free = 44 << 30                                              # a 48 GiB L40S
    plan = plan_placements(sizes, gpu, free_bytes=free)
    total = sum(c * s for c, s in zip(plan, sizes))
    assert min(plan) >= 1 and total <= 0.6 * free, (total, 0.6 * free)
    assert total < sum(c * s for c, s in zip(on_h100, sizes)) and max(plan) == gpu.placements
    # on a 24 GiB L4 one copy of every case (16.4 GiB) is over the share already: one each, never fewer
    assert plan_placements(sizes, gpu, free_bytes=22 << 30) == [1] * len(sizes)


def test_cases_whose_single_copies_are_over_the_budget_are_timed_in_groups_that_fit() -> None:
    from pipeline.agents.placement import timing_groups

    sizes = [300 * MiB, 300 * MiB, 500 * MiB, 2048 * MiB, 100 * MiB, 100 * MiB]
    assert timing_groups(sizes, None) == [list(range(6))]             # no budget: one group
    assert timing_groups(sizes, 8 << 30) == [list(range(6))]          # all fit: one group
    # within 1 GiB: consecutive cases while they fit, a case over the budget on its own
    assert timing_groups(sizes, 1024 * MiB) == [[0, 1], [2], [3], [4, 5]]
    assert timing_groups([], 1024 * MiB) == []


def test_the_cuda_suite_on_a_24_gib_gpu_is_timed_in_groups_within_the_share() -> None:
    from pipeline.agents.placement import job_budget, timing_groups
    from pipeline.build.suite_loader import load_suite
    from pipeline.contracts import Target

    gpu = for_device(MeasurementSettings(), "nvidia-l4", "gpu")
    cuda = Target.parse("cuda:sm_90")
    sizes = [sum(t.nbytes for t in c.tensors) for c in load_suite("kernels") if c.supports(cuda)]
    budget = job_budget(gpu, free_bytes=22 << 30)
    assert budget is not None and sum(sizes) > budget                 # one copy each is over the share
    groups = timing_groups(sizes, budget)
    assert len(groups) >= 2 and sorted(i for g in groups for i in g) == list(range(len(sizes)))
    for group in groups:
        plan = plan_placements([sizes[i] for i in group], gpu, free_bytes=22 << 30)
        assert sum(c * sizes[i] for c, i in zip(plan, group)) <= budget   # every group's copies within it
    assert timing_groups(sizes, job_budget(gpu, free_bytes=79 << 30)) == [list(range(len(sizes)))]   # an H100: one
