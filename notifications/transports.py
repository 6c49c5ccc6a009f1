"""The notification mediums as the engine knows them: one ``Transport`` per channel kind, found
by name in ``TRANSPORTS`` (kind -> the dotted path of its class, in its folder under
integrations/) and loaded when first asked for.

The engine (the fan-out, deliveries and their retries, ladders, digests, follow-ups, channel
settings, ``manage.py channels``) calls only these methods and never imports a medium: a new
medium is one folder under integrations/ and one line in ``TRANSPORTS`` (with its
``Channel.Kind``). A transport holds no state: one instance serves every channel of its kind.
"""

from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

from django.utils.module_loading import import_string

from notifications.models import Channel, Delivery

# Each channel kind's transport, in the order the kinds are offered.
TRANSPORTS: dict[str, str] = {
    Channel.Kind.EMAIL: "integrations.email.transport.EmailTransport",
    Channel.Kind.SLACK_APP: "integrations.slack.transport.SlackAppTransport",
    Channel.Kind.SLACK: "integrations.slack.incoming.SlackWebhookTransport",
    Channel.Kind.TEAMS: "integrations.teams.transport.TeamsTransport",
    Channel.Kind.WEBHOOK: "integrations.webhook.transport.WebhookTransport",
}


class SendFailed(Exception):
    """A delivery's attempt failed; ``final``: trying again will not help (the delivery is
    given up at once). The message says why, never a secret."""

    def __init__(self, message: str, *, status: int | None = None, final: bool = False):
        super().__init__(message)
        self.status = status
        self.final = final


class ChannelError(ValueError):
    """A channel's settings cannot be saved; the message says why (never a secret), and
    ``field`` which of its settings it is about ("" for the channel as a whole), so that a
    form shows it next to that field."""

    def __init__(self, message: str, *, field: str = ""):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ChannelFields:
    """The settings of a channel that belong to its medium, as an admin gave them (the
    settings page, Django admin, ``manage.py channels``): each medium reads its own."""

    email_roles: list[str] = field(default_factory=list)
    email_addresses: list[str] = field(default_factory=list)
    url: str = ""
    slack_channel: str = ""


class Transport:
    """What a medium does for the engine. Only ``send`` is required; the rest say what
    differs from a medium that keeps no settings of its own."""

    # The kind's name in ``manage.py channels add`` (``slack`` is the Slack app).
    command_name = ""
    # Its requests are signed with the channel's own secret, which its page can rotate.
    signs = False
    # Options of ``manage.py channels add`` that only this medium reads: (flag, help).
    command_options: tuple[tuple[str, str], ...] = ()
    # Sub-commands of ``manage.py channels`` of this medium's own: (name, help); each takes
    # ``--tenant`` and prints what ``command_run`` returns.
    command_actions: tuple[tuple[str, str], ...] = ()
    # The ChannelFields this medium reads (and a channel of its kind keeps): a form shows
    # these for its kind only, and the others are stored empty.
    fields: tuple[str, ...] = ()
    # The heading of those fields on a form.
    fields_title = ""

    def send(self, delivery: Delivery, content: dict, now: datetime) -> dict:
        """Send ``delivery``, saying ``content`` (notifications.content), at the wall clock
        ``now``; the Delivery fields to keep (who was mailed, which message was posted).
        Raises SendFailed. A follow-up (``delivery.follow_up``) is sent here too: a medium
        that posted a message may update it instead."""
        raise NotImplementedError

    def check(self, *, tenant, channel: Channel | None, given: ChannelFields) -> None:
        """Raise ChannelError saying why these settings cannot be saved (no network I/O)."""

    def store(self, *, channel: Channel, given: ChannelFields) -> str:
        """Set this medium's fields on ``channel`` (saved by the caller); a new secret to show
        once, or ""."""
        return ""

    def secret_set(self, *, channel: Channel) -> str:
        """A new signing secret on ``channel`` (saved by the caller), returned once."""
        raise ChannelError("only webhook channels sign their requests")

    def where(self, channel: Channel) -> str:
        """Where the channel's notifications go, as ``channels list`` shows it (no secret)."""
        return channel.url_hint

    def settings_section(self, *, request, is_admin: bool) -> str:
        """HTML of this medium's own section of the notification settings page, or ""."""
        return ""

    def command_prepare(self, *, tenant, options: dict) -> None:
        """Before ``channels add`` saves a channel of this kind (in its transaction): set up
        what the medium needs from ``command_options``. Raises ChannelError."""

    def command_added(self, *, tenant, channel: Channel, summary: str) -> list[str]:
        """The lines ``channels add`` prints for the channel saved ([]: the summary)."""
        return []

    def command_overview(self, *, tenant) -> str:
        """A line ``channels list`` prints before the channels ("": none)."""
        return ""

    def command_run(self, action: str, *, tenant) -> str:
        """What the sub-command ``action`` (one of ``command_actions``) prints."""
        raise NotImplementedError(action)


def fields_of(kind: str, given: ChannelFields) -> ChannelFields:
    """``given`` with only the fields of ``kind``'s medium: a channel keeps no other medium's
    settings (an e-mail channel no URL, a webhook no recipients)."""
    own = transport_for(kind).fields
    return ChannelFields(
        **{
            name: getattr(given, name) if name in own else getattr(ChannelFields(), name)
            for name in ("email_roles", "email_addresses", "url", "slack_channel")
        }
    )


@cache
def transport_for(kind: str) -> Transport:
    """The transport of a channel kind (KeyError for a kind that has none)."""
    return import_string(TRANSPORTS[kind])()


def transports() -> list[Transport]:
    """Every medium's transport, in the order of ``TRANSPORTS``."""
    return [transport_for(kind) for kind in TRANSPORTS]
