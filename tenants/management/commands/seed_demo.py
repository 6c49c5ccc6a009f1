import json

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from tenants.models import ApiToken, Membership, Tenant, User
from tenants.tokens import api_token_create

DEMO_OPERATOR = "operator@demo.test"
DEMO_ADMIN = "admin@demo.test"
# Platform staff: a superuser for Django's whole admin (every tenant). The demo tenant's admin
# above is what a customer's admin is: a member with the admin role and staff status.
DEMO_PLATFORM = "platform@countersign.test"
OTHER_OPERATOR = "operator@other.test"
DEMO_SUBJECT = "partner:demo-client"
# The subject of the demo's operator token: a program that decides over the REST API.
DEMO_OPERATOR_SUBJECT = "program:demo-operator"


def _member(
    *,
    email: str,
    password: str,
    tenant: Tenant | None,
    role: str | None,
    staff: bool = False,
    superuser: bool = False,
) -> User:
    user = User.objects.filter(email=email).first()
    if user is None:
        user = User.objects.create_user(
            email=email, password=password, is_staff=staff or superuser, is_superuser=superuser
        )
    else:
        # Re-running resets the demo logins to the documented password and powers.
        user.set_password(password)
        user.is_active = True
        user.is_staff, user.is_superuser = staff or superuser, superuser
        user.save(update_fields=["password", "is_active", "is_staff", "is_superuser"])
    if tenant is not None and role is not None:
        Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    return user


class Command(BaseCommand):
    help = (
        "Create (or refresh) the demo tenants, logins and agents, and mint fresh partner and "
        "operator tokens."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON object for scripts."
        )

    def handle(self, *args, **options):
        password = settings.DEMO_OPERATOR_PASSWORD
        if not settings.DEBUG and password == settings.DEMO_OPERATOR_PASSWORD_DEFAULT:
            raise CommandError(
                "DEMO_OPERATOR_PASSWORD is the documented default; set another one to seed demo "
                "logins when DEBUG is off."
            )
        with transaction.atomic():
            demo, _ = Tenant.objects.update_or_create(
                # AI summaries on: the demo's scripted models write theirs from a template.
                slug="demo",
                defaults={"name": "Demo Co", "active": True, "ai_summaries": True},
            )
            other, _ = Tenant.objects.update_or_create(
                slug="other", defaults={"name": "Other Inc", "active": True}
            )
            _member(
                email=DEMO_OPERATOR, password=password, tenant=demo, role=Membership.Role.OPERATOR
            )
            admin = _member(
                email=DEMO_ADMIN,
                password=password,
                tenant=demo,
                role=Membership.Role.ADMIN,
                staff=True,
            )
            _member(
                email=OTHER_OPERATOR, password=password, tenant=other, role=Membership.Role.OPERATOR
            )
            _member(email=DEMO_PLATFORM, password=password, tenant=None, role=None, superuser=True)
            seeded = self.seed_app_demos(demo, **options)
            _, token = api_token_create(
                tenant=demo, subject=DEMO_SUBJECT, name="demo client (seed_demo)", created_by=admin
            )
            _, operator_token = api_token_create(
                tenant=demo,
                subject=DEMO_OPERATOR_SUBJECT,
                name="demo operator program (seed_demo)",
                kind=ApiToken.Kind.OPERATOR,
                created_by=admin,
            )

        # An MCP gateway is served at /mcp/ (mcp_gateway), every other agent at /a2a/.
        gateways = set(seeded.get("gateways", []))
        agents = {
            slug: f"/a2a/{demo.slug}/{slug}"
            for slug in seeded.get("agents", [])
            if slug not in gateways
        }
        summary = {
            "tenant": demo.slug,
            "token": token,
            "subject": DEMO_SUBJECT,
            "operator_token": operator_token,
            "operator_subject": DEMO_OPERATOR_SUBJECT,
            "agents": agents,
            "gateways": {slug: f"/mcp/{demo.slug}/{slug}/" for slug in sorted(gateways)},
            "logins": {
                "operator": {"email": DEMO_OPERATOR, "password": password},
                "admin": {"email": DEMO_ADMIN, "password": password},
                "other_operator": {"email": OTHER_OPERATOR, "password": password},
                "platform": {"email": DEMO_PLATFORM, "password": password},
            },
        }
        if options["json"]:
            self.stdout.write(json.dumps(summary))
            return
        self.stdout.write(self.style.SUCCESS("Demo tenant 'demo' (Demo Co) is ready."))
        self.stdout.write(f"  operator login: {DEMO_OPERATOR} / {password}")
        self.stdout.write(
            f"  admin login:    {DEMO_ADMIN} / {password} (the demo tenant's admin, Django admin)"
        )
        self.stdout.write(
            f"  platform staff: {DEMO_PLATFORM} / {password} (superuser: every tenant in Django admin)"
        )
        self.stdout.write(f"  other tenant:   {OTHER_OPERATOR} / {password}")
        for slug, path in agents.items():
            self.stdout.write(f"  agent {slug}: {path}")
        for slug in sorted(gateways):
            self.stdout.write(f"  MCP gateway {slug}: /mcp/{demo.slug}/{slug}/")
        for slug in seeded.get("agents_kept", []):
            self.stdout.write(
                f"  agent {slug} kept its policy, edited since it was loaded "
                "(load_agents --replace overwrites it)"
            )
        self.stdout.write(f"  partner token ({DEMO_SUBJECT}): {token}")
        self.stdout.write(f"  operator token ({DEMO_OPERATOR_SUBJECT}, REST API): {operator_token}")

    def seed_app_demos(self, tenant: Tenant, **options) -> dict:
        """Let every installed app that has demo data seed it, in INSTALLED_APPS order.

        An app offers demo data with a ``seed_demo(self, *, tenant, **options)`` method on its
        AppConfig that returns what it made for the summary (``{"agents": [slugs]}``), so
        that this command, low in the layers, imports none of the apps above it.
        """
        seeded: dict = {}
        for config in apps.get_app_configs():
            seed_demo = getattr(config, "seed_demo", None)
            if seed_demo is not None:
                seeded.update(seed_demo(tenant=tenant, **options) or {})
        return seeded
