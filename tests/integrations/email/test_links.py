"""Approve and deny from e-mail with one-time links, with Django's mail
outbox: opening a link decides nothing; the confirm page's POST decides once."""

import re
from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from integrations.models import EmailLink
from notifications.channel_settings import channel_save
from runtime.agents.agent_models import DemoRecord
from runtime.decisions.decision_models import Interaction, Receipt
from runtime.kernel.task_models import AuditEvent, TaskState
from tests.core import DEPLOY_TOOL, REPORT_RESULT, deploy_step, status_text
from tests.integrations.conftest import BUILD
from tests.world import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def mailed(agents, notify):
    """An e-mail channel to acme's operators and admins."""
    return channel_save(
        tenant=agents.a.tenant, name="ops mail", kind="email", email_roles=["operator", "admin"]
    )[0]


def links_of(message) -> dict:
    found = dict(re.findall(r"^(Approve|Deny): (\S+)$", message.body, re.M))
    return {k.lower(): v.removeprefix("https://countersign.example") for k, v in found.items()}


def mail_to(address: str):
    """The first message mailed to ``address`` (the item's; follow-ups come after it)."""
    return next(m for m in mail.outbox if m.to == [address])


def shown_hash(page) -> str:
    return re.search(r'name="shown_hash" value="([0-9a-f]{64})"', page.content.decode())[1]


def test_the_link_shows_a_confirm_page_and_the_post_decides_once(
    agents, mailed, held, django_capture_on_commit_callbacks
):
    interaction = held()
    message = mail_to("operator@acme.test")
    links = links_of(message)
    assert set(links) == {"approve", "deny"}
    html = message.alternatives[0]
    assert html[1] == "text/html" and "Approve…" in html[0] and BUILD in html[0]
    # Stored hashed: the token is in the link only.
    token = links["approve"].split("/")[3]
    assert not EmailLink.objects.filter(token_hash=token).exists()
    assert EmailLink.objects.get(email="operator@acme.test").expires_at == interaction.expires_at

    client = Client()  # a mail scanner, or the person: nobody is signed in
    page = client.get(links["approve"])
    assert page.status_code == 200
    text = page.content.decode()
    assert f"Deploy {BUILD} to staging" in text
    assert "Approve this call?" in text
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()  # GET decides nothing

    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(links["approve"], {"shown_hash": shown_hash(page)})
    assert done.status_code == 200 and "Approved: the call is sent." in done.content.decode()
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by, interaction.answered_via) == (
        "answered",
        "user:operator@acme.test",
        "email",
    )
    interaction.task.refresh_from_db()
    assert interaction.task.state == TaskState.COMPLETED and DemoRecord.objects.count() == 1
    receipt = Receipt.objects.get()
    assert (receipt.channel, receipt.channel_user, receipt.arguments_hash) == (
        "email",
        "operator@acme.test",
        shown_hash(page),
    )
    assert AuditEvent.objects.get(action="approved").detail["channelUser"] == "operator@acme.test"

    # A second use (either link) is refused and changes nothing.
    again = client.post(links["deny"], {"reason": "no"})
    assert again.status_code == 410 and "used already" in again.content.decode()
    assert client.get(links["approve"]).status_code == 410
    assert Receipt.objects.count() == 1
    # The admin's own link says the item was decided.
    admin_links = links_of(mail_to("admin@acme.test"))
    late = client.post(admin_links["approve"], {"shown_hash": shown_hash(page)})
    assert (
        late.status_code == 410
        and "decided already, by operator@acme.test" in late.content.decode()
    )


def test_a_denial_with_a_reason_reaches_the_model(
    agents, mailed, held, django_capture_on_commit_callbacks
):
    interaction = held()
    links = links_of(mail_to("admin@acme.test"))
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(links["deny"], {"reason": "not on a Friday"})
    assert response.status_code == 200
    interaction.refresh_from_db()
    assert interaction.answer == {"approved": False, "reason": "not on a Friday"}
    interaction.task.refresh_from_db()
    assert "not on a Friday" in status_text(interaction.task) and not DemoRecord.objects.exists()


def test_an_expired_link_and_another_members_session_are_refused(agents, mailed, held):
    interaction = held()
    links = links_of(mail_to("operator@acme.test"))
    # Another member signed in in this browser: the link is not theirs.
    admin = agents.a.client_for(agents.a.admin)
    page = admin.get(links["approve"])
    assert page.status_code == 403 and "sent to someone else" in page.content.decode()
    assert admin.post(links["approve"], {}).status_code == 403
    # A member of another tenant is refused the same way.
    assert agents.b.client_for(agents.b.operator).post(links["approve"], {}).status_code == 403
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()
    # Its recipient may still use it, until the item expires.
    Interaction.objects.filter(pk=interaction.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    expired = Client().post(links["approve"], {})
    assert expired.status_code == 410 and "expired" in expired.content.decode()
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()
    assert not EmailLink.objects.exclude(used_at=None).exists()  # refused, never spent


def test_a_link_that_is_not_one_is_404_and_a_wrong_action_too(agents, mailed, held):
    held()
    links = links_of(mail_to("operator@acme.test"))
    token = links["approve"].split("/")[3]
    client = Client()
    assert client.get(f"/integrations/email/{'x' * 43}/approve").status_code == 404
    assert client.post(f"/integrations/email/{'x' * 500}/deny", {}).status_code == 404
    assert client.get(f"/integrations/email/{token}/delete").status_code == 404
    assert client.post(f"/integrations/email/{token}/approve%00", {}).status_code == 404


def test_risk_high_asks_the_recipient_to_sign_in_and_re_authenticate(
    agents, mailed, held, make_agent, django_capture_on_commit_callbacks
):
    make_agent(
        "dep",
        [deploy_step(), *REPORT_RESULT],
        tools=[DEPLOY_TOOL],
        tool_policy={"deploy/deploy_build": {"action": "approve", "risk": "high"}},
    )
    interaction = held("dep", "go")
    links = links_of(mail_to("operator@acme.test"))
    anonymous = Client()
    page = anonymous.get(links["approve"])
    assert "risk: high" in page.content.decode()
    signed_out = anonymous.post(links["approve"], {"shown_hash": shown_hash(page)})
    assert signed_out.status_code == 302
    assert signed_out["Location"].startswith(reverse("account_login"))
    # Signed in long ago (no recent authentication): re-authenticate first.
    stale = agents.a.client_for(agents.a.operator)
    response = stale.post(links["approve"], {"shown_hash": shown_hash(page)})
    assert response.status_code == 302 and "reauthenticate" in response["Location"]
    interaction.refresh_from_db()
    assert interaction.state == "open" and not Receipt.objects.exists()
    assert not EmailLink.objects.exclude(used_at=None).exists()  # not spent
    # Signed in just now: the approval is taken, stepped up.
    fresh = Client()
    fresh.post(reverse("account_login"), {"login": "operator@acme.test", "password": PASSWORD})
    with django_capture_on_commit_callbacks(execute=True):
        done = fresh.post(links["approve"], {"shown_hash": shown_hash(page)})
    assert done.status_code == 200
    receipt = Receipt.objects.get()
    assert (receipt.channel, receipt.stepped_up) == ("email", True)
    # A denial needs no step-up: nothing to re-authenticate for.


def test_arguments_changed_since_the_page_are_refused_and_the_link_kept(agents, mailed, held):
    interaction = held()
    links = links_of(mail_to("operator@acme.test"))
    response = Client().post(links["approve"], {"shown_hash": "0" * 64})
    assert (
        response.status_code == 400 and "not the ones you were shown" in response.content.decode()
    )
    interaction.refresh_from_db()
    assert interaction.state == "open"
    assert not EmailLink.objects.exclude(used_at=None).exists()


def test_viewers_and_address_list_recipients_get_no_links(agents, notify, held):
    channel_save(
        tenant=agents.a.tenant,
        name="all",
        kind="email",
        email_roles=["viewer"],
        email_addresses=["oncall@pager.example"],
    )
    held()
    for address in ("viewer@acme.test", "oncall@pager.example"):
        message = mail_to(address)
        assert not links_of(message) and "Open in Countersign" in message.body


def test_a_multi_line_question_is_mailed_with_a_one_line_subject(agents, mailed, held, make_agent):
    make_agent(
        "asker",
        [{"ask": {"id": "why", "prompt": "Which branch?\nThe release one,\r\nor main?"}}],
    )
    held("asker", "go")
    message = mail_to("operator@acme.test")
    assert message.subject == "[asker] waits for a decision: Which branch?"
    assert "The release one,\r\nor main?" in message.body and not links_of(message)
    assert "The release one,<br>or main?" in message.alternatives[0][0]


def test_the_confirm_page_posts_with_csrf(agents, mailed, held):
    interaction = held()
    links = links_of(mail_to("operator@acme.test"))
    strict = Client(enforce_csrf_checks=True)
    page = strict.get(links["deny"])
    assert strict.post(links["deny"], {"reason": "no"}).status_code == 403
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode())[1]
    response = strict.post(links["deny"], {"reason": "no", "csrfmiddlewaretoken": token})
    assert response.status_code == 200
    interaction.refresh_from_db()
    assert interaction.answer == {"approved": False, "reason": "no"}


def test_a_link_of_the_first_opening_never_decides_the_reopened_approval(
    agents, mailed, held, django_capture_on_commit_callbacks
):
    from tests.integrations.slack.test_app import void_and_reopen

    interaction = held()
    first = links_of(mail_to("operator@acme.test"))
    page = Client().get(first["approve"])  # opened before the void: the hash it showed
    void_and_reopen(interaction, django_capture_on_commit_callbacks)

    for action in ("approve", "deny"):
        opened = Client().get(first[action])
        text = opened.content.decode()
        assert opened.status_code == 410 and "changed since this e-mail" in text
        assert 'name="shown_hash"' not in text and "<form" not in text  # nothing binding
    posted = Client().post(first["approve"], {"shown_hash": shown_hash(page)})
    assert posted.status_code == 410 and "changed since this e-mail" in posted.content.decode()
    denied = Client().post(first["deny"], {"reason": "no"})
    assert denied.status_code == 410
    interaction.refresh_from_db()
    assert interaction.state == "open" and interaction.approvals == []

    # The void's follow-up mailed new links: they decide the item as it stands now.
    latest = [m for m in mail.outbox if m.to == ["operator@acme.test"] and links_of(m)][-1]
    again = links_of(latest)
    assert again["approve"] != first["approve"]
    client = Client()
    fresh = client.get(again["approve"])
    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(again["approve"], {"shown_hash": shown_hash(fresh)})
    assert done.status_code == 200
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_via) == ("answered", "email")


def test_a_deny_reason_with_a_nul_is_a_form_error_and_the_link_kept(agents, mailed, held):
    interaction = held()
    links = links_of(mail_to("operator@acme.test"))
    response = Client().post(links["deny"], {"reason": "no\x00way"})
    assert response.status_code == 400 and "NUL" in response.content.decode()
    interaction.refresh_from_db()
    assert interaction.state == "open"
    assert not EmailLink.objects.exclude(used_at=None).exists()
