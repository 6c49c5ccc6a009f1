import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tenants.models import Membership, Tenant, User
from tenants.tokens import authenticate_bearer

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _debug_on(settings):
    # pytest-django runs with DEBUG off; the embedded default (make run) has it on.
    settings.DEBUG = True


def seed() -> dict:
    out = StringIO()
    call_command("seed_demo", "--json", stdout=out)
    return json.loads(out.getvalue())


def test_seed_demo_twice_leaves_one_demo_tenant_and_both_tokens_work():
    first, second = seed(), seed()
    assert Tenant.objects.filter(slug="demo").count() == 1
    assert first["token"] != second["token"]
    for summary in (first, second):
        identity = authenticate_bearer(f"Bearer {summary['token']}")
        assert identity.tenant.slug == "demo"
        assert identity.subject == "partner:demo-client"


def test_seed_demo_creates_the_logins_and_the_other_tenant():
    summary = seed()
    operator = User.objects.get(email="operator@demo.test")
    assert operator.check_password(summary["logins"]["operator"]["password"])
    assert Membership.objects.get(user=operator).role == "operator"
    # The demo tenant's admin is what a customer's admin is: a member with the admin role and
    # staff status, not a superuser; platform staff is a login of its own.
    admin = User.objects.get(email="admin@demo.test")
    assert admin.is_staff and not admin.is_superuser
    assert Membership.objects.get(user=admin).role == "admin"
    platform = User.objects.get(email=summary["logins"]["platform"]["email"])
    assert platform.is_superuser and not platform.memberships.exists()
    assert platform.check_password(summary["logins"]["platform"]["password"])
    assert Membership.objects.get(user__email="operator@other.test").tenant.slug == "other"


def test_seed_demo_refuses_the_default_password_when_debug_is_off(settings):
    settings.DEBUG = False
    settings.DEMO_OPERATOR_PASSWORD = settings.DEMO_OPERATOR_PASSWORD_DEFAULT
    with pytest.raises(CommandError, match="DEMO_OPERATOR_PASSWORD"):
        call_command("seed_demo")
    assert not Tenant.objects.filter(slug="demo").exists()


def test_seed_demo_uses_the_configured_password(settings):
    settings.DEBUG = False
    settings.DEMO_OPERATOR_PASSWORD = "a-real-demo-secret"
    seed()
    assert User.objects.get(email="operator@demo.test").check_password("a-real-demo-secret")
