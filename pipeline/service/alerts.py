"""Alerts: a confirmed history regression is announced once, to a Slack-compatible incoming webhook.

The analysis confirms change points as commits arrive (`analysis`); this service thread looks for
regressions that are confirmed and not yet announced (`ChangePoint.alerted_at`), posts one message
each ({"text": ...}: Slack, Mattermost, Rocket.Chat and Teams' Slack-compatible hooks read it) with
the series link, the magnitude, the commit range and the series' owners (`alerts.owners`: case-id
glob -> owner), and records when. A point retracted and confirmed again is not announced twice; a
failed post is retried at the next period. Improvements are not announced.
"""

from __future__ import annotations

import fnmatch
import logging

import requests
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from pipeline.config import Settings
from pipeline.dispatch.triggers import Loop
from pipeline.store.db import session_scope
from pipeline.store.models import (
    Case,
    ChangePoint,
    Commit,
    DeviceClassRow,
    Series,
    utcnow,
)

__all__ = ["Alerter", "owners_of"]

log = logging.getLogger(__name__)
BATCH = 20
"""Alerts sent per step at most (a burst after a big import goes out over a few periods)."""


def owners_of(case_id: str, owners: dict[str, str]) -> list[str]:
    """Who owns a case's series: every owner whose glob matches, in the configured order."""
    return [owner for pattern, owner in owners.items() if fnmatch.fnmatchcase(case_id, pattern)]


class Alerter(Loop):
    def __init__(self, settings: Settings, engine: Engine) -> None:
        super().__init__("alerter", settings.alerts.period_s)
        self.settings, self.engine = settings, engine

    def step(self) -> bool:
        url = self.settings.alerts.webhook_url.get_secret_value()
        if not url:
            return False
        before, after = sa.orm.aliased(Commit), sa.orm.aliased(Commit)
        with session_scope(self.engine) as session:
            pending = session.execute(
                sa.select(ChangePoint.id, ChangePoint.series_id, ChangePoint.magnitude, Case.case_id,
                          DeviceClassRow.name, before.sha, after.sha)
                .join(Series, ChangePoint.series_id == Series.id).join(Case, Series.case_id == Case.id)
                .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
                .join(before, ChangePoint.before_commit_id == before.id)
                .join(after, ChangePoint.after_commit_id == after.id)
                .where(ChangePoint.lifecycle == "confirmed", ChangePoint.direction == "regression",
                       ChangePoint.alerted_at.is_(None))
                .order_by(ChangePoint.id).limit(BATCH)).all()
        sent = 0
        for cp_id, series_id, magnitude, case_id, device_class, first, last in pending:
            owners = owners_of(case_id, self.settings.alerts.owners)
            text = (f"benchfarm: {case_id} on {device_class} regressed {magnitude:+.1%} "
                    f"between {first[:10]} and {last[:10]}: {self.settings.public_url}/series/{series_id}"
                    + (f" (owners: {', '.join(owners)})" if owners else ""))
            try:
                response = requests.post(url, json={"text": text}, timeout=10)
                response.raise_for_status()
            except requests.RequestException as exc:
                log.warning("alert for change point %d not sent (%s); retried later", cp_id, exc)
                break
            with session_scope(self.engine) as session:
                session.execute(sa.update(ChangePoint).where(ChangePoint.id == cp_id).values(alerted_at=utcnow()))
            sent += 1
        return sent == BATCH
