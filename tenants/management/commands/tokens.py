"""`python manage.py tokens create|list|revoke`: API tokens from a shell.

The plaintext is printed once, by ``create``, alone on stdout (so that
``TOKEN=$(python manage.py tokens create ...)`` works); only its prefix is kept.
"""

import getpass
import uuid
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q
from django.utils import timezone

from tenants.models import ApiToken, Tenant
from tenants.tokens import api_token_create, api_token_revoke

# Ten years: longer is no expiry (leave --expires-days out); far longer is no date at all.
MAX_EXPIRES_DAYS = 3650


def tenant_named(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise CommandError(
            f"No tenant {slug!r}; `python manage.py tenants create {slug}` makes one."
        )
    return tenant


def shell_actor() -> str:
    """Who acts from a shell, as the audit log and a revoked token name them."""
    try:
        return f"shell:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (a container's numeric uid)
        return "shell"


class Command(BaseCommand):
    help = "Create, list or revoke API tokens (partner tokens call agents; operator tokens decide over REST)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Mint a token; its plaintext is printed once.")
        create.add_argument("--tenant", required=True, help="The tenant's slug.")
        create.add_argument(
            "--subject", required=True, help="Who the token acts for, e.g. partner:globex."
        )
        create.add_argument(
            "--kind", choices=[k.value for k in ApiToken.Kind], default=ApiToken.Kind.PARTNER
        )
        create.add_argument("--name", default="", help="What it is for (default: the subject).")
        create.add_argument(
            "--agents", default="", help="Comma-separated agent slugs it may call (default: all)."
        )
        create.add_argument("--expires-days", type=int, default=None)
        create.add_argument(
            "--step-up",
            dest="may_step_up",
            action="store_true",
            help="Operator tokens: may approve tools marked risk: high (given only at creation).",
        )
        listing = sub.add_parser("list", help="List tokens (never their plaintext).")
        listing.add_argument("--tenant", help="Only this tenant's tokens.")
        listing.add_argument(
            "--all",
            dest="include_revoked",
            action="store_true",
            help="Include revoked tokens, with when and by whom.",
        )
        revoke = sub.add_parser("revoke", help="Revoke a token by its prefix or id.")
        revoke.add_argument("token", help="The prefix (cs_<prefix>_...) or the id from `list`.")
        revoke.add_argument("--tenant", help="Only look in this tenant.")

    def handle(self, *args, **options):
        getattr(self, f"handle_{options['action']}")(**options)

    def handle_create(
        self, *, tenant, subject, kind, name, agents, expires_days, may_step_up=False, **_
    ):
        owner = tenant_named(tenant)
        slugs = [s.strip() for s in agents.split(",") if s.strip()]
        if expires_days is not None and not 0 < expires_days <= MAX_EXPIRES_DAYS:
            raise CommandError(
                f"--expires-days must be a number of days from 1 to {MAX_EXPIRES_DAYS} "
                "(leave it out for a token that does not expire)."
            )
        expires_at = timezone.now() + timedelta(days=expires_days) if expires_days else None
        try:
            token, plaintext = api_token_create(
                tenant=owner,
                subject=subject.strip(),
                name=(name or subject).strip(),
                kind=kind,
                all_agents=not slugs,
                agent_slugs=slugs,
                expires_at=expires_at,
                may_step_up=may_step_up,
            )
        except ValidationError as exc:
            problems = "; ".join(
                f"{field}: {' '.join(msgs)}" for field, msgs in exc.message_dict.items()
            )
            raise CommandError(f"Token not created: {problems}") from None
        self.stderr.write(
            f"Created {token.kind} token {token.prefix} for {token.subject} in {owner.slug}; "
            "the plaintext below is shown this once."
        )
        self.stdout.write(plaintext)

    def handle_list(self, *, tenant, include_revoked, **_):
        tokens = ApiToken.objects.select_related("tenant").order_by("tenant__slug", "-created_at")
        if tenant:
            tokens = tokens.filter(tenant=tenant_named(tenant))
        if not include_revoked:
            tokens = tokens.filter(revoked_at__isnull=True)
        self.stdout.write("prefix        tenant        kind      state    subject  (name)")
        now = timezone.now()
        for token in tokens:
            state = (
                "revoked" if token.is_revoked else "expired" if token.is_expired(now) else "active"
            )
            line = (
                f"{token.prefix:<13} {token.tenant.slug:<13} {token.kind:<9} {state:<8} "
                f"{token.subject}  ({token.name})" + ("  [step-up]" if token.may_step_up else "")
            )
            if token.is_revoked:
                by = f" by {token.revoked_by}" if token.revoked_by else ""
                line += f"  revoked {token.revoked_at:%Y-%m-%d %H:%M:%S}Z{by}"
            self.stdout.write(line)

    def handle_revoke(self, *, token, tenant, **_):
        key = token.strip()
        if key.startswith("cs_"):
            key = key[3:].split("_", 1)[0]
        match = Q(prefix=key)
        try:
            match |= Q(public_id=uuid.UUID(key))
        except ValueError:
            pass
        tokens = ApiToken.objects.filter(match)
        if tenant:
            tokens = tokens.filter(tenant=tenant_named(tenant))
        found = tokens.first()
        if found is None:
            raise CommandError(f"No token {key!r}.")
        if api_token_revoke(token=found, by=shell_actor()):
            self.stdout.write(f"Revoked {found.prefix} ({found.subject} in {found.tenant.slug}).")
        else:
            self.stdout.write(f"{found.prefix} was already revoked.")
