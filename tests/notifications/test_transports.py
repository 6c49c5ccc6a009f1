"""The engine finds each medium's transport by name: every kind has one, and a kind sends
through whatever class its registry line names."""

from datetime import datetime

import pytest

from notifications.models import Channel, Delivery
from notifications.transports import TRANSPORTS, Transport, transport_for
from tests.notifications.test_delivery import hold

pytestmark = pytest.mark.django_db


class Recording(Transport):
    """A medium made up for the test: it keeps what it is asked to send."""

    sent: list[tuple[str, str]] = []

    def send(self, delivery: Delivery, content: dict, now: datetime) -> dict:
        self.sent.append((delivery.channel.name, content["event"]))
        return {"recipients": ["made-up"]}


@pytest.fixture
def registry(monkeypatch):
    """TRANSPORTS as the test changes it (each transport is loaded once, then kept)."""
    transport_for.cache_clear()
    yield TRANSPORTS
    monkeypatch.undo()
    transport_for.cache_clear()


def test_every_channel_kind_has_a_transport_of_its_medium_loaded_by_name():
    assert list(TRANSPORTS) == list(Channel.Kind.values)
    for kind in Channel.Kind.values:
        transport = transport_for(kind)
        assert isinstance(transport, Transport)
        assert type(transport).__module__.startswith("integrations.")
        assert transport is transport_for(kind)  # loaded once


def test_a_kind_sends_through_the_class_its_registry_line_names(
    registry, monkeypatch, agents, notify, channel, django_capture_on_commit_callbacks
):
    monkeypatch.setitem(registry, "teams", f"{__name__}.Recording")
    Recording.sent.clear()
    channel(agents.a.tenant, "made up", "teams")  # no URL: the made-up medium needs none
    hold(agents.a, django_capture_on_commit_callbacks)
    assert Recording.sent == [("made up", "opened")]
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.recipients) == ("delivered", ["made-up"])
