"""What a typed case id costs (issue 15: "a typed case id end to end"): parsing, and the comparison
of a realistic number of rows, whose ids the store hands out as `CaseId`s.

Parse: `str.split("/")` of one id, `CaseId.parse` of the same id again and again (cached after the
first), and the first parse of each of `--distinct` ids. Compare: tests/service/web/demo_store.py's history
with `--scale` x 15 cases (a PR head and its base on one device class; `--scale 700`: 10,500 rows),
`compare()` and the vendor-control pass of it (`_mark_controls`), then the comparison ordered by case
id as the compare page orders it. `--checkout` measures another checkout's code (e.g. a `git archive`
of the commit before the change) with this same script.

    python bench/case_id_cost.py [--distinct 10000] [--scale 200] [--checkout PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

TEXT = "gemm/llama3-8b-mlp-up/4096x14336x4096/bf16/triton"


def _best_us(statement: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(statement, number=number, repeat=5)) / number * 1e6


def _ms(times: list[float]) -> str:
    return f"median {statistics.median(times) * 1e3:.1f} ms, min {min(times) * 1e3:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--distinct", type=int, default=10_000)
    parser.add_argument("--scale", type=int, default=200)
    parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    sys.path.insert(0, str(args.checkout.resolve()))

    from pipeline.config import CompareSettings
    from pipeline.contracts.ids import CaseId
    from pipeline.results.store import compare as comparing
    from pipeline.results.store.db import open_store, session_scope
    from tests.service.web import demo_store

    texts = [f"gemm/n{i}/{i}x{i}x64/bf16/triton" for i in range(args.distinct)]
    first = timeit.timeit(lambda: [CaseId.parse(t) for t in texts], number=1) / len(texts) * 1e6
    print(f"str.split('/'):                 {_best_us(lambda: TEXT.split('/'), 200_000):.3f} us")
    print(f"CaseId.parse, the same id:      {_best_us(lambda: CaseId.parse(TEXT), 200_000):.3f} us")
    print(f"CaseId.parse, first of {len(texts)} ids: {first:.3f} us")

    home = Path(tempfile.mkdtemp())
    engine = open_store(f"sqlite:///{home}/bench.db")
    demo = demo_store.build(engine, commits=2, scale=args.scale, samples=6, device_classes=("cpu-x86-64",),
                            evil=False)
    with session_scope(engine) as session:
        def compare() -> comparing.ComparisonOut:
            return comparing.compare(session, repository=demo_store.REPO, head_sha=demo.pr_head,
                                     device_class="cpu-x86-64", settings=CompareSettings())
        rows = compare().rows
        print(f"compare(), {len(rows)} rows:     {_ms(timeit.repeat(compare, number=1, repeat=11))}")
        print(f"  its vendor controls:          {_ms(timeit.repeat(lambda: comparing._mark_controls(rows, 0.01), number=1, repeat=11))}")
        by_case = timeit.repeat(lambda: sorted(rows, key=lambda r: (str(r.case_id), r.target)), number=1, repeat=21)
        print(f"  ordered by case id:           {_ms(by_case)}")


if __name__ == "__main__":
    main()
