"""An e-mail link is its recipient's credential while it works, so its token reaches no log
line: the whole life of a link against a real uvicorn (DEBUG on and off, its access log on),
and its mail's sending in this process."""

import logging
import re
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.core import mail

from config.logging import LinkTokenMask
from runtime.decisions.decision_models import Interaction
from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step
from tests.integrations.email.test_links import links_of, mail_to
from tests.live import LiveStack
from tests.world import PASSWORD


def token_of(link: str) -> str:
    return link.split("/")[3]


def csrf_of(page: httpx.Response) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)[1]


def hash_of(page: httpx.Response) -> str:
    return re.search(r'name="shown_hash" value="([0-9a-f]{64})"', page.text)[1]


def log_in(client: httpx.Client, email: str, next_url: str = "") -> httpx.Response:
    """Sign in on the login page, as a browser does (its CSRF token, then the form)."""
    login = client.get("/accounts/login/")
    data = {"login": email, "password": PASSWORD, "csrfmiddlewaretoken": csrf_of(login)}
    if next_url:
        data["next"] = next_url
    return client.post("/accounts/login/", data=data)


@pytest.fixture
def risky(make_agent):
    """A held call marked risk: high: approving it by link asks its recipient to sign in."""
    make_agent(
        "dep",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "risk": "high"}},
    )


@pytest.mark.parametrize("debug", ["true", "false"])
def test_a_links_whole_life_never_writes_its_token_to_a_log(
    transactional_db, agents, notify, risky, tmp_path, caplog, debug
):
    from notifications.channel_settings import channel_save
    from tests.core import start

    channel_save(
        tenant=agents.a.tenant, name="ops mail", kind="email", email_roles=["operator", "admin"]
    )
    with caplog.at_level(logging.DEBUG):
        task = start(agents.a, "dep", "go")  # held; the fan-out mails its links (eager)
    interaction = Interaction.objects.get(task=task, state="open")
    links = links_of(mail_to("operator@acme.test"))
    token = token_of(links["approve"])
    assert mail.outbox and not any(token in r.getMessage() for r in caplog.records)

    stack = LiveStack(
        tmp_path,
        extra_env={
            "DJANGO_SETTINGS_MODULE": "tests.served_settings",
            "DEBUG": debug,
            "SECRET_KEY": "x" * 50,
            "SECURE_SSL_REDIRECT": "false",
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            "ACCESS_LOG": "true",
            "LOG_LEVEL": "DEBUG",
            # The decision's resumption and follow-ups are queued nowhere: nothing here runs
            # them, and nothing is left on the test's broker.
            "CELERY_BROKER_URL": "memory://",
        },
    )
    stack.start_web()
    try:
        with (
            httpx.Client(base_url=stack.url, timeout=30) as recipient,
            httpx.Client(base_url=stack.url, timeout=30) as other,
            httpx.Client(base_url=stack.url, timeout=30) as scanner,
        ):
            # A mail scanner follows the links without a method the page takes.
            assert scanner.head(links["approve"]).status_code == 405
            assert scanner.head(links["deny"]).status_code == 405
            # ... and POSTs without the page's CSRF token.
            assert scanner.post(links["approve"], data={}).status_code == 403
            # Another member, signed in, opens the link forwarded to them.
            assert log_in(other, "admin@acme.test").status_code == 302
            assert other.get(links["approve"]).status_code == 403
            # The recipient opens it, confirms, and is sent to sign in first (risk: high).
            page = recipient.get(links["approve"])
            assert page.status_code == 200
            data = {"csrfmiddlewaretoken": csrf_of(page), "shown_hash": hash_of(page)}
            step_up = recipient.post(links["approve"], data=data)
            assert step_up.status_code == 302
            location = step_up.headers["location"]
            assert token not in location and location.startswith("/accounts/login/?next=")
            next_url = parse_qs(urlsplit(location).query)["next"][0]
            signed_in = log_in(recipient, "operator@acme.test", next_url)
            assert signed_in.status_code == 302
            back = recipient.get(signed_in.headers["location"])
            assert back.status_code == 200 and "Approve this call?" in back.text
            done = recipient.post(
                back.url.path,
                data={"csrfmiddlewaretoken": csrf_of(back), "shown_hash": hash_of(back)},
            )
            assert done.status_code == 200 and "Approved" in done.text
            # Spent: its page says so, and the scanner's next visit is refused too.
            assert recipient.get(links["approve"]).status_code == 410
            assert scanner.head(links["approve"]).status_code == 405
    finally:
        stack.stop()
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_via) == ("answered", "email")

    logged = (tmp_path / "web.log").read_text(errors="replace")
    assert token not in logged
    # The lines are there, each with the token masked: the access log and Django's warnings
    # (text with DEBUG on, JSON with it off).
    for line in (
        "HEAD /integrations/email/***/approve HTTP/1.1",
        "POST /integrations/email/pending HTTP/1.1",
        "Method Not Allowed (HEAD): /integrations/email/***/approve",
        "Forbidden (CSRF cookie not set.): /integrations/email/***/approve",
        "Forbidden: /integrations/email/***/approve",
        "Gone: /integrations/email/***/approve",
    ):
        assert line in logged, line


def test_a_stale_sessions_step_up_keeps_the_token_out_of_next_and_replays_the_decision(
    agents, notify, risky, django_capture_on_commit_callbacks
):
    from notifications.channel_settings import channel_save
    from runtime.decisions.decision_models import Receipt
    from tests.core import start
    from tests.integrations.email.test_links import shown_hash

    channel_save(tenant=agents.a.tenant, name="ops mail", kind="email", email_roles=["operator"])
    with django_capture_on_commit_callbacks(execute=True):
        start(agents.a, "dep", "go")
    links = links_of(mail_to("operator@acme.test"))
    token = token_of(links["approve"])
    stale = agents.a.client_for(agents.a.operator)  # signed in long ago
    page = stale.get(links["approve"])
    response = stale.post(links["approve"], {"shown_hash": shown_hash(page)})
    assert response.status_code == 302 and "reauthenticate" in response["Location"]
    assert token not in response["Location"]
    # Re-authenticated, the decision posted to the link is replayed and taken.
    with django_capture_on_commit_callbacks(execute=True):
        done = stale.post(response["Location"], {"password": PASSWORD}, follow=False)
    assert done.status_code == 200, done
    assert "Approved" in done.content.decode()
    receipt = Receipt.objects.get()
    assert (receipt.channel, receipt.stepped_up) == ("email", True)


def test_every_logger_that_prints_a_path_masks_link_tokens_whatever_its_handler():
    # gunicorn's UvicornWorker and uvicorn give uvicorn.access handlers of their own: the
    # logger's own filter masks the record before any of them writes it.
    for name in ("uvicorn.access", "django.request", "django.security.csrf", "django.server"):
        assert any(isinstance(f, LinkTokenMask) for f in logging.getLogger(name).filters), name


def test_the_mask_keeps_each_records_shape():
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", "/integrations/email/AbC-_9/approve?x=1", "1.1", 200),
        None,
    )
    assert LinkTokenMask().filter(record)
    assert record.args[2] == "/integrations/email/***/approve?x=1" and record.args[4] == 200
    record = logging.LogRecord(
        "x",
        logging.INFO,
        __file__,
        1,
        "to %s",
        ("/accounts/login/?next=%2Fintegrations%2Femail%2FAbC%2Fapprove",),
        None,
    )
    LinkTokenMask().filter(record)
    assert record.getMessage() == "to /accounts/login/?next=%2Fintegrations%2Femail%2F***%2Fapprove"
