"""Posting reports through PyGithub against the GitHub stand-in (a real HTTP server)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from pipeline.config import Settings, load_settings
from pipeline.pr_comments.github import GitHubError, GitHubPoster
from pipeline.pr_comments.outbox import Outbox, deliver, flush
from pipeline.pr_comments.report import Report, make_report
from tests.helpers.github_standin import GitHubStandIn
from tests.pr_comments.factories import HEAD, comparison, row

REPO = "acme/kernels"
PR = 7


def _settings(standin: GitHubStandIn, tmp_path: Path, **github: Any) -> Settings:
    values = {"api_url": standin.base_url, "token": "good-token", "seconds_between_writes": 0, "backoff_s": 0.01,
              "max_wait_s": 5, "retries": 3, **github}
    return load_settings(home=tmp_path / "home", public_url="https://bench.example", github=values)


def _report(settings: Settings, *, regressed: bool = True, pr: int | None = PR,
            case: str = "gemm/x/1x1x1/bf16/triton") -> Report:
    rows = [row(case, "regressed", 0.2)] if regressed else [row(case, "improved", -0.2)]
    return make_report([comparison("nvidia-h100-sxm", rows)], settings=settings, pr=pr)


@pytest.fixture
def pull(standin: GitHubStandIn) -> GitHubStandIn:
    standin.add_token("good-token", "benchbot")
    standin.add_pull(REPO, PR, HEAD)
    return standin


def _ours(standin: GitHubStandIn) -> list[dict[str, Any]]:
    return [c for c in standin.comments(REPO, PR) if c["user"]["login"] == "benchbot"]


def test_first_report_creates_one_comment_second_edits_it(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path)
    poster = GitHubPoster(settings.github)
    first = poster.post(_report(settings, case="gemm/first/1x1x1/bf16/triton"))
    assert first.comment_created and len(pull.comments(REPO, PR)) == 1
    second = poster.post(_report(settings, case="gemm/second/1x1x1/bf16/triton"))
    assert not second.comment_created and second.comment_id == first.comment_id
    [comment] = pull.comments(REPO, PR)
    assert "gemm/second" in comment["body"] and "gemm/first" not in comment["body"]
    assert len(pull.calls("PATCH", rf"/issues/comments/{first.comment_id}$")) == 1


def test_an_edit_answered_502_is_sent_again_by_the_poster_not_by_the_transport(pull: GitHubStandIn,
                                                                              tmp_path: Path) -> None:
    """PyGithub's retry repeats no write after a 502 (`pipeline.http`'s rule: writes need an
    Idempotency-Key, which PyGithub does not send); the poster repeats an edit, which sets the same
    body again: its own back-off (the injected sleep) shows it was the one that did."""
    settings = _settings(pull, tmp_path)
    waits: list[float] = []
    poster = GitHubPoster(settings.github, sleep=waits.append)
    first = poster.post(_report(settings, case="gemm/first/1x1x1/bf16/triton"))
    pull.inject(502, times=2, method="PATCH", path=r"/issues/comments/\d+$", after=True, message="Bad Gateway")
    poster.post(_report(settings, case="gemm/second/1x1x1/bf16/triton"))
    assert [r.status for r in pull.calls("PATCH", rf"/issues/comments/{first.comment_id}$")] == [502, 502, 200]
    assert waits == [0.01, 0.02]
    [comment] = pull.comments(REPO, PR)
    assert "gemm/second" in comment["body"]


def test_finds_our_comment_on_page_three_among_others(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path)
    report = _report(settings)
    for i in range(120):
        pull.add_comment(REPO, PR, f"comment {i}", login=f"dev{i % 7}")
    # Someone quoting our marker is not us: only comments by our identity count.
    pull.add_comment(REPO, PR, f"quoted:\n{report.marker}\nfake", login="mallory")
    for i in range(129):
        pull.add_comment(REPO, PR, f"comment {i}", login="dev")
    ours = pull.add_comment(REPO, PR, report.marker + "\nold body", login="benchbot")
    pull.add_comment(REPO, PR, "after ours", login="dev")
    assert len(pull.comments(REPO, PR)) == 252

    posted = GitHubPoster(settings.github).post(report)
    assert posted.comment_id == ours["id"] and not posted.comment_created
    assert [c["body"] for c in _ours(pull)] == [report.body]
    pages = [r.query.get("page", "1") for r in pull.calls("GET", rf"/issues/{PR}/comments$")]
    assert pages == ["1", "2", "3"]
    assert next(c for c in pull.comments(REPO, PR) if c["user"]["login"] == "mallory")["body"].endswith("fake")


def test_status_carries_the_verdict_per_policy(pull: GitHubStandIn, tmp_path: Path) -> None:
    failing = _settings(pull, tmp_path, verdict_policy="fail")
    GitHubPoster(failing.github).post(_report(failing))
    neutral = _settings(pull, tmp_path, verdict_policy="neutral")
    GitHubPoster(neutral.github).post(_report(neutral))
    GitHubPoster(failing.github).post(_report(failing, regressed=False))
    states = [(s["state"], s["context"], s["description"]) for s in pull.statuses(REPO, HEAD)]
    assert states == [("failure", "benchfarm", "regressed: 1 regressed on 1 device class"),
                      ("success", "benchfarm", "regressed: 1 regressed on 1 device class"),
                      ("success", "benchfarm", "improved: 1 improved on 1 device class")]
    assert pull.statuses(REPO, HEAD)[0]["target_url"] == f"https://bench.example/compare?repository=acme%2Fkernels&head={HEAD}"


def test_push_gets_a_status_and_no_comment(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path)
    posted = GitHubPoster(settings.github).post(_report(settings, pr=None))
    assert posted.comment_id is None and pull.comments(REPO, PR) == []
    assert [s["state"] for s in pull.statuses(REPO, HEAD)] == ["failure"]


def _app_key() -> tuple[str, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


@pytest.mark.parametrize(("policy", "conclusion"), [("fail", "failure"), ("neutral", "neutral")])
def test_github_app_posts_a_check_run(pull: GitHubStandIn, tmp_path: Path, policy: str, conclusion: str) -> None:
    private, public = _app_key()
    pull.enable_app("321", public, slug="benchfarm-ci")
    key_file = tmp_path / "app.pem"
    key_file.write_text(private)
    settings = _settings(pull, tmp_path, token="", app_id="321", app_private_key=str(key_file), verdict_policy=policy)
    poster = GitHubPoster(settings.github)
    first = poster.post(_report(settings))
    second = poster.post(_report(settings))
    assert first.comment_created and second.comment_id == first.comment_id
    [comment] = pull.comments(REPO, PR)
    assert comment["user"]["login"] == "benchfarm-ci[bot]"
    runs = pull.check_runs(REPO)
    assert [(r["name"], r["head_sha"], r["status"], r["conclusion"]) for r in runs] == [("benchfarm", HEAD, "completed", conclusion)] * 2
    assert runs[0]["output"]["title"] == "regressed: 1 regressed on 1 device class" and "gemm/x" in runs[0]["output"]["summary"]
    assert runs[0]["details_url"].startswith("https://bench.example/compare?")
    assert len(pull.calls("POST", r"/app/installations/4242/access_tokens$")) == 1, "the installation token is reused"
    assert pull.statuses(REPO, HEAD) == []


def test_wrong_token_is_a_clear_error(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path, token="wrong")
    with pytest.raises(GitHubError, match=r"answered 401 Bad credentials — check BENCHFARM_GITHUB__TOKEN") as caught:
        GitHubPoster(settings.github).post(_report(settings))
    assert caught.value.status == 401
    assert pull.comments(REPO, PR) == []


def test_no_credentials_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GitHubError, match="no GitHub credentials: set BENCHFARM_GITHUB__TOKEN"):
        GitHubPoster(load_settings(home=tmp_path).github)


@pytest.mark.parametrize(("method", "path"), [("GET", r"/issues/7/comments$"), ("POST", r"/issues/7/comments$"),
                                              ("GET", r"/pulls/7$"), ("POST", r"/statuses/")])
def test_two_502s_then_success_posts(pull: GitHubStandIn, tmp_path: Path, method: str, path: str) -> None:
    settings = _settings(pull, tmp_path)
    pull.inject(502, times=2, method=method, path=path, message="Bad Gateway")
    GitHubPoster(settings.github).post(_report(settings))
    assert len(_ours(pull)) == 1 and len(pull.statuses(REPO, HEAD)) == 1
    answered = [r.status for r in pull.calls(method, path)]
    assert answered[:3] == [502, 502, answered[2]] and answered[2] in (200, 201)


def test_a_lost_reply_to_the_comment_post_makes_no_second_comment(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path)
    pull.inject(502, times=1, method="POST", path=r"/issues/7/comments$", after=True)
    posted = GitHubPoster(settings.github).post(_report(settings))
    assert posted.comment_created and len(_ours(pull)) == 1
    assert [r.status for r in pull.calls("POST", r"/issues/7/comments$")] == [502]


def test_rate_limit_with_retry_after_waits_then_posts(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path)
    pull.inject(429, times=1, method="POST", path=r"/issues/7/comments$", headers={"Retry-After": "1"},
                message="You have exceeded a secondary rate limit")
    GitHubPoster(settings.github).post(_report(settings))
    first, second = pull.calls("POST", r"/issues/7/comments$")
    assert (first.status, second.status) == (429, 201) and second.at - first.at >= 0.95
    assert len(_ours(pull)) == 1


def test_secondary_rate_limit_403_waits_the_configured_time(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path, max_wait_s=0.3)   # secondary waits: min(60 s, max_wait_s)
    pull.inject(403, times=1, method="GET", path=r"/pulls/7$", message="You have exceeded a secondary rate limit.")
    GitHubPoster(settings.github).post(_report(settings))
    first, second = pull.calls("GET", r"/pulls/7$")
    assert (first.status, second.status) == (403, 200) and second.at - first.at >= 0.28


def test_rate_limit_longer_than_allowed_keeps_the_report(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path, max_wait_s=2)
    reset = str(int(time.time()) + 3600)
    pull.inject(403, times=1, method="GET", path=r"/pulls/7$", message="API rate limit exceeded for user.",
                headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset})
    pull.inject(429, times=1, method="POST", path=r"/statuses/", headers={"Retry-After": "3600"})
    started = time.monotonic()
    delivery = deliver(_report(settings), settings)
    assert delivery.posted is None and delivery.kept_at is not None and "403" in (delivery.error or "")
    delivery = deliver(_report(settings, pr=None), settings)
    assert delivery.kept_at is not None and "Retry-After 3600s is over the 2s allowed" in (delivery.error or "")
    assert time.monotonic() - started < 5, "did not wait for the reset"


def test_permanent_failure_goes_to_the_outbox_and_flush_posts_later(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path)
    pull.inject(503, times=1000, path=r"/issues/7/comments")
    older = deliver(_report(settings, case="gemm/older/1x1x1/bf16/triton"), settings)
    newer = deliver(_report(settings, case="gemm/newer/1x1x1/bf16/triton"), settings)
    assert older.kept_at == newer.kept_at and newer.error and "503" in newer.error
    kept = list(Outbox(settings.outbox_dir).pending())
    assert len(kept) == 1 and "gemm/newer" in kept[0][1].body, "a newer report of the PR replaces the older"
    assert [p.name for p in settings.outbox_dir.iterdir()] == [kept[0][0].name], "no temporary files left"

    assert [d.kept_at for _, d in flush(settings)] == [newer.kept_at], "still failing: still kept"
    pull.injections.clear()
    [(report, delivery)] = flush(settings)
    assert delivery.posted is not None and delivery.posted.comment_created
    assert [c["body"] for c in _ours(pull)] == [report.body] and "gemm/newer" in report.body
    assert list(settings.outbox_dir.iterdir()) == [] and flush(settings) == []


def test_wrong_token_report_is_kept(pull: GitHubStandIn, tmp_path: Path) -> None:
    settings = _settings(pull, tmp_path, token="wrong")
    delivery = deliver(_report(settings), settings)
    assert delivery.kept_at is not None and delivery.kept_at.is_file() and "401" in (delivery.error or "")
    fixed = _settings(pull, tmp_path)
    [(_, flushed)] = flush(fixed)
    assert flushed.posted is not None and len(_ours(pull)) == 1


def test_report_flush_command(pull: GitHubStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from pipeline import cli

    settings = _settings(pull, tmp_path, token="wrong")
    deliver(_report(settings), settings)
    monkeypatch.setenv("BENCHFARM_HOME", str(settings.home))
    monkeypatch.setenv("BENCHFARM_GITHUB__API_URL", pull.base_url)
    monkeypatch.setenv("BENCHFARM_GITHUB__TOKEN", "good-token")
    monkeypatch.setenv("BENCHFARM_GITHUB__SECONDS_BETWEEN_WRITES", "0")
    assert cli.main(["report", "flush"]) == 0
    assert "acme/kernels#7: posted" in capsys.readouterr().out and len(_ours(pull)) == 1
    assert cli.main(["report", "flush"]) == 0
    assert "is empty" in capsys.readouterr().out
