"""Alerts over real sockets: a confirmed history regression reaches a local Slack-compatible receiver
(HTTP) and a local mail server (SMTP) once per change point and channel, with its owners; a failed
post or mail is retried without repeating the other channel; improvements are not sent; one that
the analysis retracts after it was announced is withdrawn by a follow-up on each channel."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import SecretStr
from sqlalchemy import Engine

from pipeline.config import AlertSettings, Settings
from pipeline.service.alerts import Alerter, mail_recipients, owners_of
from pipeline.results.store import analysis
from pipeline.results.store.db import session_scope
from pipeline.results.store.models import ChangePoint, Series
from tests.helpers.json_standin import JsonStandIn
from tests.helpers.smtp_standin import SmtpStandIn

from tests.helpers import factories as f
from tests.results.store.test_analysis import N, record_main, upload_main


class Receiver:
    """Stands in for a Slack incoming webhook: takes POSTed JSON on loopback; the next `fail_next`
    posts get a 500."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.attempts = 0
        self.fail_next = 0
        self.peer = JsonStandIn(self._answer)
        self.url = f"{self.peer.url}/hooks/T000/B000/XXX"

    def _answer(self, path: str, headers: Any, body: Any) -> tuple[int, dict[str, Any]]:
        self.attempts += 1
        if self.fail_next:
            self.fail_next -= 1
            return 500, {"error": "try later"}
        self.messages.append(body)
        return 200, {"ok": True}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.peer.close()


def test_a_confirmed_regression_is_announced_once_with_its_owners(seeded: Engine, receiver: Receiver,
                                                                   tmp_path: Any) -> None:
    settings = Settings(home=tmp_path, public_url="http://bench.example", alerts=AlertSettings(
        webhook_url=SecretStr(receiver.url), owners={"gemm/*": "<@U0GEMM>", "conv/*": "<@U0CONV>"}))
    alerter = Alerter(settings, seeded)
    with session_scope(seeded) as s:
        record_main(s)
    receiver.fail_next = 1   # the first post fails: the alert is kept and sent at the next step
    for i in range(N):   # +20 % at main-20, fixed at main-40, analysed as each commit arrives
        with session_scope(seeded) as s:
            upload_main(s, i)
        alerter.step()
    alerter.step()
    assert receiver.attempts == 2 and len(receiver.messages) == 1, receiver.messages
    text = receiver.messages[0]["text"]
    assert f"{f.GEMM} on {f.DEVICE_CLASS} regressed +20" in text and "<@U0GEMM>" in text and "U0CONV" not in text
    assert "http://bench.example/series/" in text and f.sha("main-19")[:10] in text and f.sha("main-20")[:10] in text
    with session_scope(seeded) as s:
        rows = s.execute(sa.select(ChangePoint.direction, ChangePoint.alerted_at)
                         .where(ChangePoint.lifecycle == "confirmed")).all()
    assert sorted((d, a is not None) for d, a in rows) == [("improvement", False), ("regression", True)]


@pytest.fixture
def mail_server() -> Iterator[SmtpStandIn]:
    server = SmtpStandIn(credentials=("bench", "s3cret/+"))
    yield server
    server.close()


def test_a_confirmed_regression_is_mailed_once_to_the_team_and_its_owners(
        seeded: Engine, receiver: Receiver, mail_server: SmtpStandIn, tmp_path: Any) -> None:
    settings = Settings(home=tmp_path, public_url="http://bench.example", alerts=AlertSettings(
        webhook_url=SecretStr(receiver.url), smtp_url=SecretStr(mail_server.url("bench", "s3cret%2F%2B")),
        email_from="benchfarm@bench.example", email_to=["kernels@team.example"],
        owners={"gemm/*": "ada@team.example", "*/iree": "<@U0IREE>", "conv/*": "bob@team.example"}))
    alerter = Alerter(settings, seeded)
    with session_scope(seeded) as s:
        record_main(s)
    receiver.fail_next = 1      # the webhook's first post fails: nothing is mailed before it is through
    mail_server.fail_next = 1   # then the mail server is busy once: the webhook is not posted again
    for i in range(N):
        with session_scope(seeded) as s:
            upload_main(s, i)
        alerter.step()
    alerter.step()
    alerter.step()
    assert receiver.attempts == 2 and len(receiver.messages) == 1, receiver.messages
    assert mail_server.attempts == 2, mail_server.attempts
    (mail,) = mail_server.received
    assert mail.sender == "benchfarm@bench.example"
    assert mail.recipients == ["kernels@team.example", "ada@team.example"]   # the team, then the series' owner
    assert mail.message["Subject"].startswith(f"benchfarm: {f.GEMM} on {f.DEVICE_CLASS} regressed +20")
    body = mail.message.get_content()
    assert "http://bench.example/series/" in body and f.sha("main-19")[:10] in body and f.sha("main-20")[:10] in body
    assert "owners: ada@team.example" in body and "bob@" not in body
    with session_scope(seeded) as s:
        rows = s.execute(sa.select(ChangePoint.direction, ChangePoint.alerted_at, ChangePoint.emailed_at)
                         .where(ChangePoint.lifecycle == "confirmed")).all()
    assert sorted((d, a is not None, e is not None) for d, a, e in rows) == [("improvement", False, False),
                                                                              ("regression", True, True)]


def test_mail_goes_to_the_owners_that_are_addresses() -> None:
    alerts = AlertSettings(email_to=["team@x.example"])
    assert mail_recipients(["<@U1>", "ada@x.example", "Ada", "team@x.example"], alerts) == ["team@x.example",
                                                                                          "ada@x.example"]
    with pytest.raises(ValueError, match="smtp_url"):
        AlertSettings(smtp_url=SecretStr("http://mail.example"))


def test_owners_are_matched_by_glob() -> None:
    owners = {"gemm/*": "a", "*/iree": "b", "conv/*": "c"}
    assert owners_of("gemm/x/1x1x1/f32/iree", owners) == ["a", "b"]
    assert owners_of("attention/y/1/f16/triton", owners) == []


def reanalyse(engine: Engine, settings: Settings, min_magnitude: float | None) -> None:
    """The series' minimum magnitude set and the series analysed again, as the series-settings route does."""
    with session_scope(engine) as s:
        series = s.scalars(sa.select(Series)).one()
        series.min_magnitude = min_magnitude
        s.flush()
        analysis.analyze_series(s, series.id, settings.analysis)


def test_an_announced_regression_that_is_retracted_is_withdrawn_on_each_channel_and_announced_again(
        seeded: Engine, receiver: Receiver, mail_server: SmtpStandIn, tmp_path: Any) -> None:
    """The regression confirmed at main-20 is announced; raising the series' minimum magnitude over it (what
    the series-settings route does: the series analysed again) retracts it, and the next step sends one
    follow-up per channel that withdraws it, with the reason. Back to the default, it is confirmed again and
    announced again; nothing is sent twice."""
    settings = Settings(home=tmp_path, public_url="http://bench.example", alerts=AlertSettings(
        webhook_url=SecretStr(receiver.url), smtp_url=SecretStr(mail_server.url("bench", "s3cret%2F%2B")),
        email_to=["kernels@team.example"]))
    alerter = Alerter(settings, seeded)
    with session_scope(seeded) as s:
        record_main(s)
    for i in range(N):
        with session_scope(seeded) as s:
            upload_main(s, i)
        alerter.step()
    assert [m["text"].split(" regressed")[0] for m in receiver.messages] == [
        f"benchfarm: {f.GEMM} on {f.DEVICE_CLASS}"], receiver.messages
    assert len(mail_server.received) == 1

    reanalyse(seeded, settings, 0.5)   # +20 % is under the series' new minimum: retracted
    alerter.step()
    alerter.step()
    assert len(receiver.messages) == 2 and len(mail_server.received) == 2
    withdrawal = receiver.messages[1]["text"]
    assert withdrawal.startswith(f"benchfarm: withdrawn: {f.GEMM} on {f.DEVICE_CLASS} regressed +"), withdrawal
    assert "no longer confirmed (retracted: " in withdrawal and f.sha("main-20")[:10] in withdrawal
    assert mail_server.received[1].message["Subject"].startswith(f"benchfarm: withdrawn: {f.GEMM}")
    with session_scope(seeded) as s:
        (row,) = s.scalars(sa.select(ChangePoint).where(ChangePoint.direction == "regression")).all()
        assert row.lifecycle == "retracted" and row.alerted_at is not None and row.emailed_at is not None
        assert row.alert_withdrawn_at is not None and row.alert_withdrawn_at >= row.alerted_at
        assert row.email_withdrawn_at is not None and row.email_withdrawn_at >= row.emailed_at

    reanalyse(seeded, settings, None)   # the default again: it stands again, confirmed, and is announced again
    alerter.step()
    alerter.step()
    assert len(receiver.messages) == 3 and len(mail_server.received) == 3
    assert receiver.messages[2]["text"].startswith(f"benchfarm: {f.GEMM} on {f.DEVICE_CLASS} regressed +")
    with session_scope(seeded) as s:
        (row,) = s.scalars(sa.select(ChangePoint).where(ChangePoint.direction == "regression")).all()
        assert row.lifecycle == "confirmed" and row.alert_withdrawn_at is not None
        assert row.alerted_at is not None and row.alerted_at > row.alert_withdrawn_at


def test_a_regression_confirmed_again_before_its_withdrawal_went_out_is_not_withdrawn(
        seeded: Engine, receiver: Receiver, tmp_path: Any) -> None:
    settings = Settings(home=tmp_path, public_url="http://bench.example",
                        alerts=AlertSettings(webhook_url=SecretStr(receiver.url)))
    alerter = Alerter(settings, seeded)
    with session_scope(seeded) as s:
        record_main(s)
    for i in range(N):
        with session_scope(seeded) as s:
            upload_main(s, i)
    alerter.step()
    assert len(receiver.messages) == 1
    reanalyse(seeded, settings, 0.5)
    reanalyse(seeded, settings, None)
    alerter.step()
    assert len(receiver.messages) == 1, receiver.messages
