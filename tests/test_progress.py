"""A long step's progress as log lines: first and last of each stage, one every few seconds between."""

from __future__ import annotations

from pipeline.progress import ProgressLines


def test_a_step_logs_its_ends_and_a_line_every_few_seconds_between() -> None:
    now = [0.0]
    lines: list[tuple[str, int, int]] = []
    progress = ProgressLines(lambda *line: lines.append(line), every_s=5.0, clock=lambda: now[0])
    for done in range(1, 41):   # a 40-round timing, a round a second
        progress(f"timing: round {done}", done, 40)
        now[0] += 1.0
    assert [done for _, done, _ in lines] == [1, 6, 11, 16, 21, 26, 31, 36, 40]
    lines.clear()
    for done in range(1, 4):    # a quick stage right after: its first and last, nothing lost between stages
        progress("checking", done, 3)
    assert [done for _, done, _ in lines] == [1, 3]
