"""`python manage.py members add|invite|list`: people and their roles from a shell.

``invite`` is ``add`` plus the e-mail that Django admin's "Send an invitation" action sends
(a link to set a password), so nobody's password passes through a shell.
"""

from importlib import import_module
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import DisallowedHost, ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_email
from django.db import transaction
from django.test import RequestFactory

from tenants.management.commands.tokens import tenant_named
from tenants.models import Membership, User


def site_request(base_url: str):
    """A request to the site at base_url, which the invitation's link is built from."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(f"--base-url must be http(s)://host[:port], not {base_url!r}.")
    request = RequestFactory().get(
        "/", HTTP_HOST=parts.netloc, secure=parts.scheme == "https", REMOTE_ADDR="127.0.0.1"
    )
    try:
        request.get_host()
    except DisallowedHost:
        raise CommandError(f"{parts.netloc} is not in ALLOWED_HOSTS.") from None
    request.user = AnonymousUser()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore()
    return request


def invitation_send(*, user: User, request) -> None:
    """Mail the user a link to set their password, as the admin action does."""
    from allauth.account.forms import ResetPasswordForm
    from allauth.core.context import request_context

    form = ResetPasswordForm(data={"email": user.email})
    if not form.is_valid():
        raise CommandError(f"No invitation sent: {form.errors.as_text()}")
    # allauth builds the link from the request it finds in its context (there is no site).
    with request_context(request):
        form.save(request)


class Command(BaseCommand):
    help = "Add people to a tenant (with a role), invite them by e-mail, or list the members."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        for action, text in (
            ("add", "Add (or re-role) a member; no e-mail."),
            ("invite", "Add a member and e-mail them a link to set their password."),
        ):
            cmd = sub.add_parser(action, help=text)
            cmd.add_argument("email")
            cmd.add_argument("--tenant", required=True, help="The tenant's slug.")
            cmd.add_argument(
                "--role", choices=[r.value for r in Membership.Role], default="operator"
            )
            cmd.add_argument("--staff", action="store_true", help="May use Django admin.")
            if action == "invite":
                cmd.add_argument(
                    "--base-url",
                    default="",
                    help="The site's address for the link (default: PUBLIC_BASE_URL, "
                    "else http://127.0.0.1:8000).",
                )
        listing = sub.add_parser("list", help="List a tenant's members.")
        listing.add_argument("--tenant", required=True)

    def handle(self, *args, **options):
        tenant = tenant_named(options["tenant"])
        if options["action"] == "list":
            for m in Membership.objects.filter(tenant=tenant).select_related("user"):
                self.stdout.write(f"{m.user.email:<40} {m.role}")
            return
        email = User.objects.normalize_email(options["email"].strip())
        try:
            validate_email(email)
        except ValidationError:
            raise CommandError(f"{options['email']!r} is not an e-mail address.") from None
        request = None
        if options["action"] == "invite":
            base = options["base_url"] or settings.PUBLIC_BASE_URL or "http://127.0.0.1:8000"
            request = site_request(base.rstrip("/"))
        with transaction.atomic():
            user = User.objects.filter(email__iexact=email).first()
            created = user is None
            if created:
                # No usable password: the invitation's link sets one.
                user = User.objects.create_user(email=email, password=None)
            if options["staff"] and not user.is_staff:
                user.is_staff = True
                user.save(update_fields=["is_staff"])
            Membership.objects.update_or_create(
                tenant=tenant, user=user, defaults={"role": options["role"]}
            )
        self.stdout.write(
            f"{'Added' if created else 'Updated'} {user.email} as {options['role']} in {tenant.slug}."
        )
        if request is not None:
            invitation_send(user=user, request=request)
            self.stdout.write(f"Sent an invitation to {user.email}.")
