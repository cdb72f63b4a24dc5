import pytest


@pytest.mark.parametrize("n", [64, 256])
def test_sum(benchmark, n):
    values = list(range(n))
    assert benchmark(sum, values) == n * (n - 1) // 2


def test_sorted(benchmark):
    values = list(range(500, 0, -1))
    assert benchmark(sorted, values)[0] == 1
