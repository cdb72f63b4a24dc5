"""Triage of change points, after Dana: who moved which change point to which state, when, and why.

States (`states.TRIAGE_STATES`): needs triage (new), noisy (not a real change), confirmed (real;
a bug link is required), intended (real and wanted: it rebases the series, see `analysis`),
assigned (someone works on it; the assignee is required), fixed. Allowed moves (`TRANSITIONS`)::

    needs triage -> noisy | confirmed | intended | assigned
    confirmed    -> assigned | fixed | noisy | intended
    assigned     -> assigned (hand over) | fixed | confirmed | noisy | intended
    noisy | intended | fixed -> needs triage (reopen) | confirmed

Every move is a `TriageEvent` (the history is never rewritten) and the change point's `state` is
set to the event's in the same transaction: the current state is always the latest event's.
`who` is the authenticated token's name; `at` is now. Nothing here commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from urllib.parse import urlparse

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.orm import Session

from pipeline.results.store.models import ChangePoint, TriageEvent, utcnow
from pipeline.results.store.states import TRIAGE_STATES

__all__ = ["TRANSITIONS", "TriageError", "TriageEventOut", "event_out", "events", "triage", "triage_histories"]

TRANSITIONS: dict[str, tuple[str, ...]] = {
    "needs triage": ("noisy", "confirmed", "intended", "assigned"),
    "confirmed": ("assigned", "fixed", "noisy", "intended"),
    "assigned": ("assigned", "fixed", "confirmed", "noisy", "intended"),
    "noisy": ("needs triage", "confirmed"),
    "intended": ("needs triage", "confirmed"),
    "fixed": ("needs triage", "confirmed"),
}
if set(TRANSITIONS) != set(TRIAGE_STATES):
    raise RuntimeError("triage.TRANSITIONS must name every state of states.TRIAGE_STATES")


class TriageError(ValueError):
    """A move that is not allowed or lacks what its state needs; the message names the field."""


# One move of a change point's triage (the API's document: a docstring would be its description
# there); its change point is the one it is listed under.
class TriageEventOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: int
    state: str
    who: str
    at: datetime
    bug_link: str | None
    assignee: str | None
    note: str


def event_out(event: TriageEvent) -> TriageEventOut:
    """The document of a stored triage event."""
    return TriageEventOut(id=event.id, state=event.state, who=event.who, at=event.at, bug_link=event.bug_link,
                          assignee=event.assignee, note=event.note)


def _checked_link(link: str) -> str:
    parsed = urlparse(link)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise TriageError(f"bug_link: {link!r} is not an http(s) URL")
    return link


def triage(
    session: Session, *, change_point_id: int, state: str, who: str, bug_link: str | None = None,
    assignee: str | None = None, note: str = "",
) -> TriageEventOut:
    """Move a change point to `state` as `who` (module doc); returns the event.

    Raises LookupError for an unknown change point, TriageError for an unknown state, a move
    `TRANSITIONS` does not allow, confirmed without a bug link, assigned without an assignee.
    A bug link or assignee given with another state is kept on the event (e.g. "fixed" with the
    link of the fix).
    """
    if state not in TRIAGE_STATES:
        raise TriageError(f"state: {state!r} is not one of {', '.join(TRIAGE_STATES)}")
    change_point = session.get(ChangePoint, change_point_id, with_for_update=True)
    if change_point is None:
        raise LookupError(f"no change point {change_point_id}")
    if state not in TRANSITIONS[change_point.state]:
        allowed = ", ".join(TRANSITIONS[change_point.state])
        raise TriageError(f"state: a change point in state {change_point.state!r} cannot become {state!r} "
                          f"(allowed: {allowed})")
    bug_link = bug_link.strip() if bug_link else None
    assignee = assignee.strip() if assignee else None
    if state == "confirmed" and not bug_link:
        raise TriageError("bug_link: confirming a change point needs a link to the bug that tracks it")
    if state == "assigned" and not assignee:
        raise TriageError("assignee: assigning a change point needs the assignee")
    if bug_link:
        bug_link = _checked_link(bug_link)
    event = TriageEvent(change_point_id=change_point.id, state=state, who=who, at=utcnow(), bug_link=bug_link,
                        assignee=assignee, note=note)
    session.add(event)
    change_point.state = state
    session.flush()
    return event_out(event)


def events(session: Session, change_point_id: int) -> list[TriageEventOut]:
    """A change point's triage history, oldest first."""
    rows = session.scalars(sa.select(TriageEvent).where(TriageEvent.change_point_id == change_point_id)
                           .order_by(TriageEvent.at, TriageEvent.id))
    return [event_out(e) for e in rows]


def triage_histories(session: Session, change_point_ids: Sequence[int]) -> dict[int, list[TriageEventOut]]:
    """change point id -> its triage events, oldest first: one query."""
    out: dict[int, list[TriageEventOut]] = {i: [] for i in change_point_ids}
    if not out:
        return out
    for e in session.scalars(sa.select(TriageEvent).where(TriageEvent.change_point_id.in_(list(out)))
                             .order_by(TriageEvent.at, TriageEvent.id)):
        out[e.change_point_id].append(event_out(e))
    return out
