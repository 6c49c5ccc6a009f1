"""E-mail channels: a real SMTP server receives one message per recipient."""

import socket
import threading

import pytest
from aiosmtpd.controller import Controller

from notifications.models import Delivery
from tests.notifications.test_delivery import hold

pytestmark = pytest.mark.django_db


class Inbox:
    """A real SMTP server (aiosmtpd) on loopback that keeps what it receives."""

    def __init__(self):
        self.messages: list = []
        self.received = threading.Event()

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
        self.messages.append(envelope)
        self.received.set()
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_email_channel_reaches_a_real_smtp_server(
    agents, notify, channel, settings, django_capture_on_commit_callbacks
):
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
        settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        channel(
            agents.a.tenant,
            "mail",
            "email",
            email_roles=["admin"],
            email_addresses=["oncall@acme.test"],
        )
        interaction = hold(agents.a, django_capture_on_commit_callbacks)
        assert inbox.received.wait(10)
    finally:
        controller.stop()
    assert sorted(e.rcpt_tos[0] for e in inbox.messages) == ["admin@acme.test", "oncall@acme.test"]
    text = inbox.messages[0].content.decode()
    assert "Approve deploy / deploy_build?" in text
    assert f"/inbox/{interaction.public_id}/" in text
    assert Delivery.objects.get().state == "delivered"
