"""`python manage.py channels add|list|remove|test|slack-manifest`: notification channels from a
shell, so that they can be kept as code.

``add`` makes a channel, or changes the one of that name (same kind), checked as the settings
page checks it (the same form and service). A webhook's signing secret is printed once, alone
on stdout, when it is made; ``add slack`` sets up the tenant's Slack app too and prints its
interactivity Request URL on a line of its own, to paste into Slack.

What differs by medium (a kind's name here, its own options and sub-commands, what it prints)
is its transport's (notifications.transports): this command names no medium.
"""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from notifications.channel_settings import ChannelError, channel_delete, channel_save
from notifications.forms import ChannelForm
from notifications.models import Channel
from notifications.services import channel_test
from notifications.transports import TRANSPORTS, transport_for, transports
from tenants.management.commands.tokens import shell_actor, tenant_named

# The command's names for the kinds (``slack`` is the interactive Slack app).
KINDS: dict[str, str] = {transport_for(kind).command_name: kind for kind in TRANSPORTS}
NAMES: dict[str, str] = {kind: name for name, kind in KINDS.items()}
# The medium's own sub-commands (``slack-manifest``): name -> the kind whose they are.
ACTIONS: dict[str, str] = {
    name: kind for kind in TRANSPORTS for name, _ in transport_for(kind).command_actions
}


def _words(text: str) -> list[str]:
    return [w.strip() for w in (text or "").split(",") if w.strip()]


class Command(BaseCommand):
    help = "Add, list, remove or test notification channels (e-mail, Slack, Teams, webhooks)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="Add a channel, or change the one of that name.")
        add.add_argument("kind", choices=list(KINDS))
        add.add_argument("--tenant", required=True, help="The tenant's slug.")
        add.add_argument("--name", default="", help="The channel's name (default: the kind).")
        add.add_argument("--roles", default="", help="E-mail: roles to mail, e.g. operator,admin.")
        add.add_argument("--addresses", default="", help="E-mail: addresses, comma-separated.")
        add.add_argument("--url", default="", help="Incoming webhooks: the URL (kept encrypted).")
        for transport in transports():
            for flag, text in transport.command_options:
                add.add_argument(flag, default="", help=text)
        add.add_argument("--channel", default="", help="slack: the Slack channel's ID (C0123…).")
        add.add_argument("--kinds", default="", help="Only these: approval,question,connection.")
        add.add_argument("--agents", default="", help="Only these agents' items (slugs).")
        add.add_argument(
            "--tools", default="", help='Only these tools ("server/tool" or "server").'
        )
        arguments = add.add_mutually_exclusive_group()
        arguments.add_argument(
            "--omit-arguments",
            dest="omit_arguments",
            action="store_true",
            default=None,
            help="Keep held calls' arguments (and their summary) out of this channel.",
        )
        arguments.add_argument(
            "--include-arguments",
            dest="omit_arguments",
            action="store_false",
            help="Send held calls' summary and arguments (the default).",
        )
        add.add_argument(
            "--member",
            default=None,
            metavar="EMAIL",
            help="Whose own channel it is (a member's e-mail address; \"\": the team's). "
            "Left out, a changed channel keeps its member.",
        )
        add.add_argument("--disabled", action="store_true", help="Add it switched off.")
        listing = sub.add_parser("list", help="List a tenant's channels (never their secrets).")
        listing.add_argument("--tenant", required=True)
        for name, text in (("remove", "Delete a channel."), ("test", "Send a test through it.")):
            one = sub.add_parser(name, help=text)
            one.add_argument("channel", help="The channel's name or id (nch_…).")
            one.add_argument("--tenant", required=True)
        for transport in transports():
            for name, text in transport.command_actions:
                sub.add_parser(name, help=text).add_argument("--tenant", required=True)

    def handle(self, *args, **options):
        if options["action"] in ACTIONS:
            transport = transport_for(ACTIONS[options["action"]])
            owner = tenant_named(options["tenant"])
            self.stdout.write(transport.command_run(options["action"], tenant=owner))
            return
        getattr(self, f"handle_{options['action']}")(**options)

    def _channel(self, tenant, named: str) -> Channel:
        channel = Channel.objects.filter(tenant=tenant, name=named).first()
        channel = channel or Channel.objects.filter(tenant=tenant, public_id=named).first()
        if channel is None:
            raise CommandError(
                f"No channel {named!r} in {tenant.slug}; `channels list` shows them."
            )
        return channel

    def handle_add(self, **options):
        # What the medium sets up (the Slack app) and its channel together, or neither.
        with transaction.atomic():
            self._add(**options)

    def _add(self, *, kind, tenant, name, omit_arguments, disabled, member, **options):
        owner = tenant_named(tenant)
        stored = KINDS[kind]
        transport = transport_for(stored)
        name = (name or kind).strip()
        existing = Channel.objects.filter(tenant=owner, name=name).first()
        if existing is not None and existing.kind != stored:
            raise CommandError(
                f"The channel {name!r} is a {NAMES[existing.kind]} channel; "
                "a channel's kind cannot change (remove it, or give another --name)."
            )
        try:
            transport.command_prepare(tenant=owner, options=options)
        except ChannelError as exc:
            raise CommandError(str(exc)) from None
        if omit_arguments is None:
            omit_arguments = existing.omit_arguments if existing else False
        if member is None:
            # Not told: a member's own channel stays theirs (re-adding it must not clear it).
            owned = existing.member if existing else None
            member = owned.user.email if owned else ""
        form = ChannelForm(
            {
                "name": name,
                "kind": stored,
                "enabled": not disabled,
                "email_roles": _words(options["roles"]),
                "email_addresses": options["addresses"],
                "url": options["url"],
                "slack_channel": options["channel"],
                "kinds": _words(options["kinds"]),
                "agents": options["agents"],
                "tools": options["tools"],
                "omit_arguments": omit_arguments,
            }
        )
        if not form.is_valid():
            problems = "; ".join(
                f"{field}: {' '.join(map(str, errors))}"
                if field != "__all__"
                else " ".join(map(str, errors))
                for field, errors in form.errors.items()
            )
            raise CommandError(f"Channel not saved: {problems}")
        data = form.cleaned_data
        try:
            channel, secret = channel_save(
                tenant=owner,
                channel=existing,
                name=data["name"],
                kind=stored,
                enabled=data["enabled"],
                email_roles=data["email_roles"],
                email_addresses=data["email_addresses"],
                url=data["url"],
                slack_channel=data["slack_channel"],
                kinds=data["kinds"],
                agents=data["agents"],
                tools=data["tools"],
                omit_arguments=data["omit_arguments"],
                member_email=member.strip(),
                actor=shell_actor(),
                via="shell",
            )
        except ChannelError as exc:
            raise CommandError(f"Channel not saved: {exc}") from None
        verb = "Changed" if existing else "Added"
        summary = f"{verb} channel {channel.name} ({NAMES[channel.kind]}) in {owner.slug}"
        lines = transport.command_added(tenant=owner, channel=channel, summary=summary)
        if not lines and secret:
            self.stderr.write(f"{summary}; its signing secret, below, is shown this once.")
            lines = [secret]
        for line in lines or [f"{summary}."]:
            self.stdout.write(line)

    def handle_list(self, *, tenant, **_):
        owner = tenant_named(tenant)
        for transport in transports():
            overview = transport.command_overview(tenant=owner)
            if overview:
                self.stdout.write(overview)
        channels = (
            Channel.objects.filter(tenant=owner).select_related("member__user").order_by("name")
        )
        if not channels:
            self.stdout.write("No channels.")
        for channel in channels:
            where = transport_for(channel.kind).where(channel)
            filters = [
                f"{label}: {','.join(values)}"
                for label, values in (
                    ("kinds", channel.kinds),
                    ("agents", channel.agents),
                    ("tools", channel.tools),
                )
                if values
            ]
            self.stdout.write(
                f"{channel.public_id}  {channel.name:<20} {NAMES[channel.kind]:<13} {where}"
                + (f"  [{'; '.join(filters)}]" if filters else "")
                + ("  [arguments omitted]" if channel.omit_arguments else "")
                + (f"  [own: {channel.member.user.email}]" if channel.member else "")
                + ("" if channel.enabled else "  (off)")
            )

    def handle_remove(self, *, tenant, channel, **_):
        found = self._channel(tenant_named(tenant), channel)
        channel_delete(channel=found, actor=shell_actor(), via="shell")
        self.stdout.write(f"Removed channel {found.name}.")

    def handle_test(self, *, tenant, channel, **_):
        found = self._channel(tenant_named(tenant), channel)
        delivery = channel_test(channel=found)
        self.stdout.write(
            f"A test notification through {found.name} is queued (delivery {delivery.pk}); "
            "the settings page shows how it went."
        )
