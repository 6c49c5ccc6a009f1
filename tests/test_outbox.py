"""Development's outbox: every e-mail sent is kept (config.outbox) and shown at
/dev/outbox/, decoded, its links clickable; only with DEBUG and only to someone signed in."""

import re
from http import HTTPStatus

import pytest
from django.core.mail import EmailMultiAlternatives
from django.core.management import call_command
from django.test import Client

from config.env import listen_url
from config.outbox import OUTBOX_KEEP, outbox_names, outbox_trim

pytestmark = pytest.mark.django_db

PASSPHRASE = "a long new passphrase"
HREF = re.compile(r'<a href="([^"]+)"')


@pytest.fixture
def outbox(settings, tmp_path):
    """Development's settings: mail kept in VAR_DIR/outbox/, links at where it listens."""
    settings.DEBUG = True
    settings.VAR_DIR = tmp_path
    settings.EMAIL_BACKEND = "config.outbox.OutboxBackend"
    settings.LISTEN_URL = listen_url("127.0.0.1", "8123")
    settings.PUBLIC_BASE_URL = settings.NOTIFY_BASE_URL = ""
    return tmp_path / "outbox"


def test_an_invitation_is_in_the_outbox_with_a_link_that_works(world, outbox):
    call_command("members", "invite", "newcomer@acme.test", "--tenant", "acme")
    operator = world.a.client_for(world.a.operator)

    listing = operator.get("/dev/outbox/")
    assert listing.status_code == HTTPStatus.OK
    page = listing.content.decode()
    assert "newcomer@acme.test" in page and "Acme" in page
    (name,) = outbox_names()
    shown = operator.get(f"/dev/outbox/{name}/").content.decode()
    # Decoded (no quoted-printable soft breaks), and the link a link.
    assert "=\n" not in shown and "=3D" not in shown
    (link,) = [h for h in HREF.findall(shown) if "/accounts/invitation/" in h]
    assert link.startswith("http://127.0.0.1:8123/accounts/invitation/")

    # Followed by the newcomer (a browser with no session): it sets their password.
    newcomer = Client()
    path = link.removeprefix("http://127.0.0.1:8123")
    form = newcomer.get(path)
    assert form.status_code == HTTPStatus.OK and b"password" in form.content.lower()
    done = newcomer.post(path, {"new_password1": PASSPHRASE, "new_password2": PASSPHRASE})
    assert done.status_code == HTTPStatus.FOUND
    assert Client().login(email="newcomer@acme.test", password=PASSPHRASE)


def test_the_html_part_is_shown_sandboxed_with_its_links_listed(world, outbox):
    message = EmailMultiAlternatives(
        "Approve deploy", "Approve: http://127.0.0.1:8123/x/approve", to=["operator@acme.test"]
    )
    message.attach_alternative(
        '<p style="color:red">Hi <a href="http://127.0.0.1:8123/x/approve">Approve…</a>'
        '<script>alert(1)</script><a href="javascript:alert(2)">no</a></p>',
        "text/html",
    )
    message.send()
    (name,) = outbox_names()
    operator = world.a.client_for(world.a.operator)
    shown = operator.get(f"/dev/outbox/{name}/").content.decode()
    assert '<a href="http://127.0.0.1:8123/x/approve">Approve…</a>' in shown
    assert "javascript:" not in shown and "<script>" not in shown
    assert f'src="/dev/outbox/{name}/html"' in shown and "sandbox=" in shown
    html = operator.get(f"/dev/outbox/{name}/html")
    assert html.status_code == HTTPStatus.OK
    policy = html["Content-Security-Policy"]
    assert policy.startswith("sandbox ") and "allow-scripts" not in policy
    assert "default-src 'none'" in policy and "frame-ancestors 'self'" in policy
    assert html["X-Frame-Options"] == "SAMEORIGIN"
    assert html.content.decode().startswith('<base target="_top">')


def test_the_outbox_is_for_development_and_for_people_signed_in(world, outbox, settings):
    call_command("members", "invite", "newcomer@acme.test", "--tenant", "acme")
    (name,) = outbox_names()
    anonymous = Client().get("/dev/outbox/")
    assert anonymous.status_code == HTTPStatus.FOUND and "/accounts/login/" in anonymous["Location"]
    assert Client().get(f"/dev/outbox/{name}/").status_code == HTTPStatus.FOUND
    operator = world.a.client_for(world.a.operator)
    for missing in ("0" * 20 + "-00000000", "..%2F..%2Fdev-secret-key", "x"):
        assert operator.get(f"/dev/outbox/{missing}/").status_code == HTTPStatus.NOT_FOUND
    assert operator.get(f"/dev/outbox/{name}/html").status_code == HTTPStatus.NOT_FOUND  # text only
    settings.DEBUG = False
    for path in ("/dev/outbox/", f"/dev/outbox/{name}/"):
        assert operator.get(path).status_code == HTTPStatus.NOT_FOUND


def test_the_outbox_keeps_the_newest_messages(outbox):
    outbox.mkdir()
    for i in range(OUTBOX_KEEP + 3):
        (outbox / f"{i:020d}-0000abcd.eml").write_bytes(b"Subject: x\n\nx\n")
    outbox_trim(outbox)
    names = outbox_names(limit=OUTBOX_KEEP + 10)
    assert len(names) == OUTBOX_KEEP and names[0] == f"{OUTBOX_KEEP + 2:020d}-0000abcd"
