"""A member's Slack DM while they are away: the tenant's Slack app posts
an item to the DMs of the members it is for; an away member's DM is left out and their
delegate's DM gets the item, with buttons the delegate decides with (their own rights), the
same rule as e-mail's and every medium's (notifications.routing)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from integrations.slack.settings import slack_app_save
from notifications.channel_settings import channel_save
from tenants.models import Membership
from tenants.services import away_clear, away_set
from tests.integrations.conftest import ADMIN
from tests.integrations.slack.standin import BOT_TOKEN, SIGNING_SECRET, click

pytestmark = pytest.mark.django_db


def test_an_away_members_dm_goes_to_their_delegate_who_decides(agents, slack, held, slack_post):
    tenant = agents.a.tenant
    slack_app_save(tenant=tenant, bot_token=BOT_TOKEN, signing_secret=SIGNING_SECRET)
    channel_save(
        tenant=tenant,
        name="operator dm",
        kind="slack_app",
        slack_channel="D0OPERATOR",
        member_email="operator@acme.test",
    )
    channel_save(
        tenant=tenant,
        name="admin dm",
        kind="slack_app",
        slack_channel="D0ADMIN",
        member_email="admin@acme.test",
    )
    operator = Membership.objects.get(tenant=tenant, user=agents.a.operator)
    admin = Membership.objects.get(tenant=tenant, user=agents.a.admin)
    away_set(
        membership=operator,
        until=timezone.now() + timedelta(days=1),
        delegate=admin,
        actor="user:admin@acme.test",
    )
    interaction = held()
    posted = slack.called("chat.postMessage")
    assert [p["channel"] for p in posted] == ["D0ADMIN"]
    [ts] = list(slack.messages)
    slack_post(click(posted[0], "cs_approve", user=ADMIN, channel="D0ADMIN", ts=ts))
    interaction.refresh_from_db()
    assert (interaction.state, interaction.answered_by) == ("answered", "user:admin@acme.test")

    # Back: their own DM is told again.
    away_clear(membership=operator, actor="user:admin@acme.test")
    held()
    later = sorted(p["channel"] for p in slack.called("chat.postMessage")[1:])
    assert later == ["D0ADMIN", "D0OPERATOR"]
