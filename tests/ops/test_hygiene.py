"""Library hygiene: a2a-sdk's error tables, the login page without sign-up, the favicon."""

import pytest
from a2a.utils import errors as sdk
from django.contrib.staticfiles import finders

from a2a_endpoint import errors
from runtime.kernel import errors as domain

SDK_MATCHES = [
    (errors.invalid_request("x"), sdk.InvalidRequestError),
    (errors.method_not_found("x"), sdk.MethodNotFoundError),
    (errors.invalid_params("message", "bad"), sdk.InvalidParamsError),
    (errors.unsupported("no"), sdk.UnsupportedOperationError),
    (errors.push_not_supported(), sdk.PushNotificationNotSupportedError),
    (errors.content_type_not_supported("text/plain"), sdk.ContentTypeNotSupportedError),
    (errors.version_not_supported("0.3"), sdk.VersionNotSupportedError),
    (errors.from_domain(domain.TaskNotFound("none")), sdk.TaskNotFoundError),
    (errors.from_domain(domain.TaskNotCancelable("ended")), sdk.TaskNotCancelableError),
]


@pytest.mark.parametrize(("error", "sdk_type"), SDK_MATCHES)
def test_errors_take_code_and_reason_from_a2a_sdk(error, sdk_type):
    assert error.code == sdk.JSON_RPC_ERROR_CODE_MAP[sdk_type]
    assert error.reason == sdk.A2A_ERROR_MAPPING[sdk_type].reason
    body = error.body(1)["error"]
    assert body["code"] == error.code and body["data"][0]["reason"] == error.reason


def test_the_errors_the_sdk_has_no_entry_for_keep_their_wire_values():
    assert (errors.parse_error("x").code, errors.parse_error("x").reason) == (-32700, "PARSE_ERROR")
    assert errors.unsupported("taken", "INTERACTION_ALREADY_DECIDED").reason == (
        "INTERACTION_ALREADY_DECIDED"
    )
    assert errors.from_domain(domain.RuntimeFault("boom")).reason == "INTERNAL"
    assert errors.agent_not_found().code == -32000


@pytest.mark.django_db
def test_the_login_page_does_not_offer_sign_up(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "sign up" not in page.lower()
    assert "/accounts/signup/" not in page
    assert "invitation" in page
    assert 'name="login"' in page and 'name="password"' in page


@pytest.mark.django_db
def test_pages_link_the_favicon_and_favicon_ico_is_served(client):
    page = client.get("/accounts/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    assert '<link rel="icon" href="/static/favicon.ico" sizes="32x32">' in page
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == "/static/favicon.ico"
    ico = finders.find("favicon.ico")
    with open(ico, "rb") as fh:
        assert fh.read(4) == b"\x00\x00\x01\x00"  # an ICO file
    with open(finders.find("favicon.svg")) as fh:
        assert fh.read().startswith("<svg")
