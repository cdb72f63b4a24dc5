"""Alerts: a confirmed history regression is announced once per channel: a Slack-compatible
incoming webhook and/or e-mail (SMTP); one that stops being confirmed is withdrawn the same way.

The analysis confirms change points as commits arrive (`analysis`; the confirmation rule is the
one under which a confirmed point is rarely taken back: docs/design.md, "Change-point detection"); this
service thread looks for regressions that are confirmed and not yet announced on a configured
channel (`ChangePoint.alerted_at` for the webhook, `emailed_at` for e-mail) and sends one message
each, with the series link, the magnitude, the commit range and the series' owners
(`alerts.owners`: case-id glob -> owner). The webhook gets {"text": ...} (Slack, Mattermost,
Rocket.Chat and Teams' Slack-compatible hooks read it); the mail goes to `alerts.email_to` and to
the owners that are e-mail addresses. Each channel records when it sent, so a failure on one
(retried at the next period) never repeats the other.

An announced regression that the analysis later retracts, or takes back to suspected, is withdrawn
on each channel that announced it: a follow-up message saying so and why (the retraction's
reason), recorded in `alert_withdrawn_at` / `email_withdrawn_at`. Confirmed again after that, it
is announced again; confirmed again before its withdrawal went out, nothing is sent. Improvements
are neither announced nor withdrawn. Pull-request comments carry no history alerts (they compare a
PR with its base), so there is nothing to withdraw there.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from urllib.parse import unquote, urlsplit

import requests

from pipeline import http
from pipeline.config import AlertSettings, Settings
from pipeline.contracts.ids import CaseId
from pipeline.loops import Loop
from pipeline.results.store import alerts as owed_alerts
from pipeline.results.store.db import Engine, session_scope

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
WEBHOOK_RETRIES = 2
"""Connection attempts repeated per webhook post (`pipeline.http`'s policy; a failed post is owed)."""


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
        """Announce what became confirmed, then withdraw what stopped being; True when a batch was full."""
        alerts = self.settings.alerts
        webhook, smtp = alerts.webhook_url.get_secret_value(), alerts.smtp_url.get_secret_value()
        if not webhook and not smtp:
            return False
        channels = ([_WEBHOOK] if webhook else []) + ([_EMAIL] if smtp else [])
        announced = self._pass(channels, withdraw=False)
        withdrawn = self._pass(channels, withdraw=True)
        return announced or withdrawn

    def _pass(self, channels: list[_Channel], *, withdraw: bool) -> bool:
        """Send what each channel owes (module doc): announcements of confirmed regressions, or the
        follow-ups of announced ones that are no longer confirmed. True when the batch was full."""
        with session_scope(self.engine) as session:
            pending = owed_alerts.alerts_due(session, [channel.name for channel in channels], withdraw=withdraw,
                                             limit=BATCH)
        alerts = self.settings.alerts
        sent = 0
        for due in pending:
            cp_id, series_id, magnitude, lifecycle, reason = (due.change_point_id, due.series_id, due.magnitude,
                                                              due.lifecycle, due.reason)
            case_id, device_class, first, last = due.case_id, due.device_class, due.first_sha, due.last_sha
            owners = owners_of(case_id, alerts.owners)
            link = f"{self.settings.public_url}/series/{series_id}"
            if withdraw:
                why = reason or "the analysis no longer confirms it; it is suspected again"
                headline = f"benchfarm: withdrawn: {case_id} on {device_class} regressed {magnitude:+.1%}"
                text = (f"{headline} between {first[:10]} and {last[:10]} is no longer confirmed ({lifecycle}: "
                        f"{why}): {link}")
            else:
                headline = f"benchfarm: {case_id} on {device_class} regressed {magnitude:+.1%}"
                text = f"{headline} between {first[:10]} and {last[:10]}: {link}"
            text += f" (owners: {', '.join(owners)})" if owners else ""
            for channel, owing in zip(channels, due.owed, strict=True):
                if not owing:
                    continue
                if not channel.send(self.settings, owners, headline, text, cp_id):
                    return False   # retried at the next period; the other channels' marks stay
                with session_scope(self.engine) as session:
                    owed_alerts.mark_sent(session, cp_id, channel.name, withdraw=withdraw)
            sent += 1
        return sent == BATCH


@dataclass(frozen=True)
class _Channel:
    """One way alerts go out; the store records what it sent for each change point (`store.alerts`)."""

    name: owed_alerts.Channel

    def send(self, settings: Settings, owners: list[str], headline: str, text: str, cp_id: int) -> bool:
        """Post or mail one message; False when it failed (logged; retried later)."""
        alerts = settings.alerts
        if self is _WEBHOOK:
            try:
                # a POST without Idempotency-Key (a repeat is a second message): only a connection that
                # could not be opened is tried again here; any other failure waits for the next period
                with http.session(http.retry_policy(WEBHOOK_RETRIES)) as client:
                    response = client.post(alerts.webhook_url.get_secret_value(), json={"text": text}, timeout=10)
                response.raise_for_status()
            except requests.RequestException as exc:
                log.warning("alert for change point %d not posted (%s); retried later", cp_id, exc)
                return False
            return True
        recipients = mail_recipients(owners, alerts)
        if not recipients:
            return True   # no recipient for this series: nothing owed
        try:
            send_mail(alerts.smtp_url.get_secret_value(), sender=alerts.email_from, recipients=recipients,
                      subject=headline, body=text)
        except (OSError, smtplib.SMTPException) as exc:
            log.warning("alert for change point %d not mailed (%s); retried later", cp_id, exc)
            return False
        return True


_WEBHOOK = _Channel("webhook")
_EMAIL = _Channel("email")
