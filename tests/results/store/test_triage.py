"""Triage: allowed moves, what each state needs, the history of events and the current state."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import Engine

from pipeline.results.store import queries, triage
from pipeline.results.store.db import session_scope
from pipeline.results.store.triage import TriageError

from .test_analysis import copied_stepped  # noqa: F401  (the fixture)


def _first(s):  # type: ignore[no-untyped-def]
    return queries.list_regressions(s)[0].id


def test_moves_are_recorded_with_who_and_the_latest_is_the_state(copied_stepped: Engine) -> None:  # noqa: F811
    with session_scope(copied_stepped) as s:
        cp = _first(s)
        triage.triage(s, change_point_id=cp, state="confirmed", who="alice", bug_link="https://bugs.example/1")
        triage.triage(s, change_point_id=cp, state="assigned", who="alice", assignee="bob")
        triage.triage(s, change_point_id=cp, state="assigned", who="bob", assignee="carol", note="handing over")
        triage.triage(s, change_point_id=cp, state="fixed", who="carol", bug_link="https://git.example/pr/7")
        events = triage.events(s, cp)
        # the analysis' events first: suspected on the first slow commit, confirmed two commits later
        assert [(e.state, e.who) for e in events] == [
            ("needs triage", "benchfarm analysis"), ("needs triage", "benchfarm analysis"), ("confirmed", "alice"),
            ("assigned", "alice"), ("assigned", "bob"), ("fixed", "carol")]
        assert events[0].note.startswith("suspected: regression") and events[1].note.startswith("confirmed: regression")
        assert events[2].bug_link == "https://bugs.example/1" and events[4].assignee == "carol"
        assert all(a.at <= b.at for a, b in itertools.pairwise(events))
        assert queries.get_change_point(s, cp).state == "fixed"  # type: ignore[union-attr]
        assert queries.list_regressions(s) == []


@pytest.mark.parametrize(
    ("state", "fields", "named"),
    [
        ("confirmed", {}, "bug_link"),
        ("confirmed", {"bug_link": "not a url"}, "bug_link"),
        ("assigned", {}, "assignee"),
        ("fixed", {}, "cannot become 'fixed'"),
        ("needs triage", {}, "cannot become 'needs triage'"),
        ("bogus", {}, "state"),
    ],
)
def test_invalid_moves_are_refused(copied_stepped: Engine, state: str, fields: dict[str, str], named: str) -> None:  # noqa: F811
    with session_scope(copied_stepped) as s:
        cp = _first(s)
        with pytest.raises(TriageError, match=named):
            triage.triage(s, change_point_id=cp, state=state, who="alice", **fields)
        assert queries.get_change_point(s, cp).state == "needs triage"  # type: ignore[union-attr]
        with pytest.raises(LookupError):
            triage.triage(s, change_point_id=99999, state="noisy", who="alice")


def test_noisy_can_be_reopened(copied_stepped: Engine) -> None:  # noqa: F811
    with session_scope(copied_stepped) as s:
        cp = _first(s)
        triage.triage(s, change_point_id=cp, state="noisy", who="alice")
        assert queries.list_regressions(s) == []
        triage.triage(s, change_point_id=cp, state="needs triage", who="bob")
        assert [r.id for r in queries.list_regressions(s)] == [cp]
