"""The error pages answer what the request earned, whatever its body (config/error_views.py)."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

NO_BOUNDARY = "multipart/form-data"
MANY_FILES = (
    b"".join(
        b'--b\r\nContent-Disposition: form-data; name="f%d"; filename="a.txt"\r\n\r\nx\r\n' % n
        for n in range(150)
    )
    + b"--b--\r\n"
)


def browser(**extra) -> Client:
    """A browser that holds a CSRF cookie (so a POST's body is read for its token)."""
    client = Client(enforce_csrf_checks=True, **extra)
    client.cookies["csrftoken"] = "J9nBejNf43VF9IH04EamSlkAlHHGLZip"
    return client


@pytest.mark.parametrize(
    "body, content_type",
    [(b"x", NO_BOUNDARY), (MANY_FILES, "multipart/form-data; boundary=b")],
)
def test_a_body_django_cannot_parse_posted_to_a_url_that_matches_nothing_is_a_404(
    body, content_type
):
    response = browser().post("/nothing-here", body, content_type=content_type)
    assert response.status_code == 404


def test_a_body_django_cannot_parse_posted_for_another_host_is_a_400(settings):
    settings.ALLOWED_HOSTS = ["countersign.test"]
    response = browser(HTTP_HOST="evil.example").post("/inbox/", b"x", content_type=NO_BOUNDARY)
    assert response.status_code == 400
