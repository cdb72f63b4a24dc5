"""Alerts: a confirmed history regression is announced once per channel: a Slack-compatible
incoming webhook and/or e-mail (SMTP).

The analysis confirms change points as commits arrive (`analysis`); this service thread looks for
regressions that are confirmed and not yet announced on a configured channel (`ChangePoint.alerted_at`
for the webhook, `emailed_at` for e-mail) and sends one message each, with the series link, the
magnitude, the commit range and the series' owners (`alerts.owners`: case-id glob -> owner). The
webhook gets {"text": ...} (Slack, Mattermost, Rocket.Chat and Teams' Slack-compatible hooks read
it); the mail goes to `alerts.email_to` and to the owners that are e-mail addresses. Each channel
records when it sent, so a failure on one (retried at the next period) never repeats the other. A
point retracted and confirmed again is not announced twice. Improvements are not announced.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import smtplib
import ssl
from email.message import EmailMessage
from urllib.parse import unquote, urlsplit

import requests
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from pipeline.config import AlertSettings, Settings
from pipeline.contracts.ids import CaseId
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

__all__ = ["Alerter", "mail_recipients", "owners_of", "send_mail"]

log = logging.getLogger(__name__)
BATCH = 20
"""Alerts sent per step at most (a burst after a big import goes out over a few periods)."""


def owners_of(case_id: CaseId | str, owners: dict[str, str]) -> list[str]:
    """Who owns a case's series: every owner whose glob matches its text, in the configured order."""
    text = str(case_id)
    return [owner for pattern, owner in owners.items() if fnmatch.fnmatchcase(text, pattern)]


_ADDRESS = re.compile(r"[^@\s<>,]+@[^@\s<>,]+\.[^@\s<>,]+")
SMTP_TIMEOUT_S = 20.0


def mail_recipients(owners: list[str], settings: AlertSettings) -> list[str]:
    """Who is mailed an alert: `email_to`, then the owners that are e-mail addresses, each once."""
    return list(dict.fromkeys([*settings.email_to, *(o for o in owners if _ADDRESS.fullmatch(o))]))


def send_mail(smtp_url: str, *, sender: str, recipients: list[str], subject: str, body: str) -> None:
    """One plain-text message through `smtp_url` (smtp:// with STARTTLS when the server offers it,
    smtps:// over TLS; user and password from the URL). Raises OSError or smtplib.SMTPException."""
    url = urlsplit(smtp_url)
    host = url.hostname or "localhost"
    server: smtplib.SMTP
    if url.scheme == "smtps":
        server = smtplib.SMTP_SSL(host, url.port or 465, timeout=SMTP_TIMEOUT_S, context=ssl.create_default_context())
    else:
        server = smtplib.SMTP(host, url.port or 25, timeout=SMTP_TIMEOUT_S)
    with server:
        server.ehlo()
        if url.scheme == "smtp" and server.has_extn("starttls"):
            server.starttls(context=ssl.create_default_context())
            server.ehlo()
        if url.username:
            server.login(unquote(url.username), unquote(url.password or ""))
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = sender, ", ".join(recipients), subject
        message.set_content(body)
        server.send_message(message)


class Alerter(Loop):
    def __init__(self, settings: Settings, engine: Engine) -> None:
        super().__init__("alerter", settings.alerts.period_s)
        self.settings, self.engine = settings, engine

    def step(self) -> bool:
        alerts = self.settings.alerts
        webhook, smtp = alerts.webhook_url.get_secret_value(), alerts.smtp_url.get_secret_value()
        owed = ([ChangePoint.alerted_at.is_(None)] if webhook else []) + ([ChangePoint.emailed_at.is_(None)] if smtp else [])
        if not owed:
            return False
        before, after = sa.orm.aliased(Commit), sa.orm.aliased(Commit)
        with session_scope(self.engine) as session:
            pending = session.execute(
                sa.select(ChangePoint.id, ChangePoint.series_id, ChangePoint.magnitude, Case.case_id,
                          DeviceClassRow.name, before.sha, after.sha, ChangePoint.alerted_at, ChangePoint.emailed_at)
                .join(Series, ChangePoint.series_id == Series.id).join(Case, Series.case_id == Case.id)
                .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
                .join(before, ChangePoint.before_commit_id == before.id)
                .join(after, ChangePoint.after_commit_id == after.id)
                .where(ChangePoint.lifecycle == "confirmed", ChangePoint.direction == "regression", sa.or_(*owed))
                .order_by(ChangePoint.id).limit(BATCH)).all()
        sent = 0
        for cp_id, series_id, magnitude, case_id, device_class, first, last, alerted, emailed in pending:
            owners = owners_of(case_id, alerts.owners)
            headline = f"benchfarm: {case_id} on {device_class} regressed {magnitude:+.1%}"
            text = (f"{headline} between {first[:10]} and {last[:10]}: {self.settings.public_url}/series/{series_id}"
                    + (f" (owners: {', '.join(owners)})" if owners else ""))
            if webhook and alerted is None:
                try:
                    response = requests.post(webhook, json={"text": text}, timeout=10)
                    response.raise_for_status()
                except requests.RequestException as exc:
                    log.warning("alert for change point %d not posted (%s); retried later", cp_id, exc)
                    break
                self._mark(cp_id, alerted_at=utcnow())
            if smtp and emailed is None:
                recipients = mail_recipients(owners, alerts)
                if recipients:
                    try:
                        send_mail(smtp, sender=alerts.email_from, recipients=recipients, subject=headline, body=text)
                    except (OSError, smtplib.SMTPException) as exc:
                        log.warning("alert for change point %d not mailed (%s); retried later", cp_id, exc)
                        break
                self._mark(cp_id, emailed_at=utcnow())   # no recipient for this series: nothing owed
            sent += 1
        return sent == BATCH

    def _mark(self, cp_id: int, **sent: object) -> None:
        with session_scope(self.engine) as session:
            session.execute(sa.update(ChangePoint).where(ChangePoint.id == cp_id).values(**sent))
