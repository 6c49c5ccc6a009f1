"""The site's own address, for links made with no request to answer: e-mails, Slack
messages, invitations sent from a shell, the `make run` banner."""

from django.conf import settings


def site_url() -> str:
    """PUBLIC_BASE_URL; else NOTIFY_BASE_URL (notifications' own, older knob); else where
    this server listens (LISTEN_URL: HOST and PORT, as `make run` binds them), read at each
    call so that a test's settings reach it."""
    return (settings.PUBLIC_BASE_URL or settings.NOTIFY_BASE_URL or settings.LISTEN_URL).rstrip("/")
