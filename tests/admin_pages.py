"""Django admin pages as a browser sees them: the values a form would submit, the options of
its selects, the links of a changelist; and a world with a row of every tenant-owned model
that Django admin shows, in both tenants of the shared fixtures."""

import re
import uuid
from html.parser import HTMLParser

from allauth.socialaccount.models import SocialApp
from django.test import Client
from django.utils import timezone

from connections.models import App, Connection, ConnectionAuditEvent
from connections.tenant_apps import tenant_app_save
from integrations.email.links import email_link_mint
from integrations.models import SlackUser
from integrations.slack.settings import slack_app_save
from notifications.models import Channel, Delivery, Ladder, Preference
from runtime.agents.agent_models import AnnotationPolicy, ToolServer
from runtime.decisions.decision_models import Interaction, StandingRule
from runtime.kernel.push.push_models import PushConfig, PushDelivery
from runtime.kernel.push.push_selectors import push_settings_for
from runtime.kernel.task_models import AuditEvent, Task, TaskEvent
from runtime.llm.credentials import credential_set
from tenants.models import ApproverGroup, Membership
from tests.core import DEPLOY_TOOL, decide, open_interaction, run, send


class FormReader(HTMLParser):
    """The fields of the page's forms: what submitting it as it is would send, and the
    options of each select (``options``: name -> values), disabled fields apart."""

    def __init__(self):
        super().__init__()
        self.values: dict[str, list[str]] = {}
        self.options: dict[str, list[str]] = {}
        self.disabled: set[str] = set()
        self._select: str | None = None
        self._selected: list[str] = []
        self._first: str | None = None
        self._textarea: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        name = a.get("name")
        if "disabled" in a and name:
            self.disabled.add(name)
        if tag == "input" and name:
            kind = a.get("type", "text")
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self.values.setdefault(name, []).append(a.get("value", "on"))
            elif kind not in ("submit", "button", "file", "image") and "disabled" not in a:
                self.values.setdefault(name, []).append(a.get("value", ""))
        elif tag == "select" and name:
            self._select, self._selected, self._first = name, [], None
            self.options[name] = []
        elif tag == "option" and self._select:
            value = a.get("value", "")
            self.options[self._select].append(value)
            if self._first is None:
                self._first = value
            if "selected" in a:
                self._selected.append(value)
        elif tag == "textarea" and name:
            self._textarea, self._text = name, []

    def handle_endtag(self, tag):
        if tag == "select" and self._select:
            if self._select not in self.disabled:
                chosen = self._selected or ([self._first] if self._first is not None else [])
                self.values[self._select] = chosen
            self._select = None
        elif tag == "textarea" and self._textarea:
            self.values[self._textarea] = ["".join(self._text)]
            self._textarea = None

    def handle_data(self, data):
        if self._textarea:
            self._text.append(data)


def read_form(html: str) -> FormReader:
    reader = FormReader()
    reader.feed(html)
    return reader


def form_data(html: str) -> dict:
    """What submitting the page's form unchanged would post (the admin's change form)."""
    values = read_form(html).values
    values.pop("csrfmiddlewaretoken", None)
    return {k: v if len(v) != 1 else v[0] for k, v in values.items()}


def change_links(html: str, app: str, model: str) -> set[str]:
    """The ids of the objects a changelist (or any page) links to."""
    return set(re.findall(rf"/admin/{app}/{model}/([^/\"]+)/change/", html))


def tenant_admin_client(side) -> Client:
    """The side's admin made a tenant admin (staff status), logged in, in the side's tenant."""
    side.admin.is_staff = True
    side.admin.save(update_fields=["is_staff"])
    client = Client()
    client.force_login(side.admin)
    return client


def populate(world, make_agent) -> None:
    """A row of every tenant-owned model Django admin shows, in both tenants."""
    app, _ = App.objects.get_or_create(
        slug="tracker", defaults={"name": "Tracker", "method": App.Method.TOKEN}
    )
    social_app = SocialApp.objects.create(
        provider="openid_connect", provider_id="files", name="Files ID", client_id="", secret=""
    )
    oauth_app, _ = App.objects.get_or_create(
        slug="files",
        defaults={"name": "Files", "method": App.Method.OAUTH2, "social_app": social_app},
    )
    for side in (world.a, world.b):
        slug = side.tenant.slug
        tenant_app_save(
            tenant=side.tenant,
            app=oauth_app,
            actor=side.admin.subject,
            secret=f"secret-{slug}",
            client_id=f"client-{slug}",
            scopes="",
            server_url=f"https://id.{slug}.test",
            authorize_url="",
            token_url="",
            token_auth_method="client_secret_post",
        )
        make_agent(
            "shipper",
            [
                {
                    "call": {
                        "server": "deploy",
                        "tool": "deploy_build",
                        "args": {"build": f"b-{slug}", "environment": "staging"},
                    }
                },
                {"reply": "done"},
            ],
            tenant=side.tenant,
            tools=[DEPLOY_TOOL],
            tool_policy={"deploy/deploy_build": "approve"},
        )
        task = run(send(side, "shipper", f"ship {slug}"))
        interaction = open_interaction(task)
        decide(interaction, by=side.admin.subject, approved=True)
        # A second task left waiting: an open approval too.
        waiting = run(send(side, "shipper", f"ship {slug} again"))
        agent = waiting.agent
        StandingRule.objects.create(
            tenant=side.tenant,
            agent=agent,
            server="deploy",
            tool="deploy_build",
            created_by=side.admin.subject,
            created_from=interaction,
        )
        credential_set(tenant=side.tenant, name=f"KEY_{slug.upper()}", secret="s" * 40)
        ToolServer.objects.create(
            tenant=side.tenant, name=f"tools-{slug}", kind="mcp", url=f"http://{slug}.test/mcp"
        )
        AnnotationPolicy.objects.create(tenant=side.tenant, unknown="deny")
        Connection.objects.create(
            tenant=side.tenant, app=app, connected_by=side.operator, connected_at=timezone.now()
        )
        ConnectionAuditEvent.objects.create(
            tenant=side.tenant, app=app, action="connected", actor=side.operator.subject
        )
        channel = Channel.objects.create(
            tenant=side.tenant, name=f"mail-{slug}", kind="email", email_roles=["admin"]
        )
        Ladder.objects.create(
            tenant=side.tenant,
            agent=agent,
            tool="deploy/deploy_build",
            steps=[{"after": "15m", "action": "remind", "roles": []}],
        )
        Delivery.objects.create(
            tenant=side.tenant,
            channel=channel,
            interaction=open_interaction(waiting),
            event="opened",
            webhook_id=f"wh-{uuid.uuid4().hex}",
        )
        Preference.objects.create(membership=Membership.objects.get(user=side.operator))
        push_settings_for(tenant=side.tenant)
        config = PushConfig.objects.create(
            tenant=side.tenant,
            task=waiting,
            subject=side.subject,
            public_id=f"push-{slug}",
            url=f"https://{slug}.test/hook",
            receiver=f"{slug}.test:443",
        )
        event = TaskEvent.objects.filter(task=waiting).order_by("seq").first()
        PushDelivery.objects.create(
            tenant=side.tenant,
            config=config,
            event=event,
            seq=event.seq,
            webhook_id=f"pd-{uuid.uuid4().hex}",
        )
        slack_app_save(
            tenant=side.tenant, bot_token=f"xoxb-{slug}-0123456789", signing_secret="a" * 32
        )
        SlackUser.objects.create(
            tenant=side.tenant, slack_user_id=f"U{slug.upper()}", email=side.operator.email
        )
        email_link_mint(
            interaction=open_interaction(waiting),
            membership=Membership.objects.get(user=side.operator),
            email=side.operator.email,
        )
        group = ApproverGroup.objects.create(tenant=side.tenant, slug=f"sre-{slug}", name="SRE")
        group.members.add(Membership.objects.get(user=side.operator))
        assert Task.objects.filter(tenant=side.tenant).count() == 2
        assert Interaction.objects.filter(tenant=side.tenant).exists()
        assert AuditEvent.objects.filter(tenant=side.tenant).exists()
