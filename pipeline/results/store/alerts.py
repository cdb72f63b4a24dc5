"""What the alerter owes on each channel, as the store records it: a confirmed regression is
announced once per channel (`ChangePoint.alerted_at` for the webhook, `emailed_at` for e-mail), and
withdrawn on each channel that announced it once it is confirmed no more (`alert_withdrawn_at`,
`email_withdrawn_at`; owed while earlier than the announcement). Sending is `pipeline.service.alerts`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session, aliased

from pipeline.contracts.ids import CaseId
from pipeline.results.store.models import Case, ChangePoint, Commit, DeviceClassRow, Series, utcnow

__all__ = ["CHANNELS", "AlertDue", "Channel", "alerts_due", "mark_sent"]

Channel = Literal["webhook", "email"]
CHANNELS: dict[Channel, tuple[str, str]] = {"webhook": ("alerted_at", "alert_withdrawn_at"),
                                           "email": ("emailed_at", "email_withdrawn_at")}
"""channel -> the change point's columns that record its announcement and its withdrawal"""


def _owes(channel: Channel, *, withdraw: bool) -> sa.ColumnElement[bool]:
    sent, withdrawn = (getattr(ChangePoint, column) for column in CHANNELS[channel])
    if withdraw:
        return sa.and_(sent.is_not(None), sa.or_(withdrawn.is_(None), withdrawn < sent))
    return sa.or_(sent.is_(None), sa.and_(withdrawn.is_not(None), withdrawn >= sent))


@dataclass(frozen=True)
class AlertDue:
    change_point_id: int
    series_id: int
    magnitude: float
    lifecycle: str
    reason: str | None
    case_id: CaseId
    device_class: str
    first_sha: str
    """the last commit before the change"""
    last_sha: str
    """the first commit after it"""
    owed: tuple[bool, ...]
    """per channel asked for, in that order: whether it owes this message"""


def alerts_due(session: Session, channels: Sequence[Channel], *, withdraw: bool, limit: int) -> list[AlertDue]:
    """Regressions some of `channels` owe an announcement (confirmed, not announced since their last
    withdrawal) or, with `withdraw`, a withdrawal (announced, confirmed no more): at most `limit`, oldest first."""
    owed = [_owes(channel, withdraw=withdraw) for channel in channels]
    standing = ChangePoint.lifecycle != "confirmed" if withdraw else ChangePoint.lifecycle == "confirmed"
    before, after = aliased(Commit), aliased(Commit)
    rows = session.execute(
        sa.select(ChangePoint.id, ChangePoint.series_id, ChangePoint.magnitude, ChangePoint.lifecycle,
                  ChangePoint.reason, Case.case_id, DeviceClassRow.name, before.sha, after.sha, *owed)
        .join(Series, ChangePoint.series_id == Series.id).join(Case, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .join(before, ChangePoint.before_commit_id == before.id)
        .join(after, ChangePoint.after_commit_id == after.id)
        .where(standing, ChangePoint.direction == "regression", sa.or_(*owed))
        .order_by(ChangePoint.id).limit(limit)).all()
    return [AlertDue(*row[:9], owed=tuple(bool(o) for o in row[9:])) for row in rows]


def mark_sent(session: Session, change_point_id: int, channel: Channel, *, withdraw: bool) -> None:
    """The channel sent the change point's announcement (or, with `withdraw`, its withdrawal) now."""
    column = CHANNELS[channel][1 if withdraw else 0]
    session.execute(sa.update(ChangePoint).where(ChangePoint.id == change_point_id).values({column: utcnow()}))
