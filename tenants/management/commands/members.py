"""`python manage.py members add|invite|resend|revoke|role|deactivate|reactivate|remove|away|
back|list`: a tenant's people from a shell.

The same services as Django admin's "Members" (tenants.services): ``invite`` is ``add`` plus
the invitation e-mail (who invited, the tenant, the role, a link that sets a password and
expires), so that nobody's password passes through a shell; ``remove`` ends the person's
sessions and keeps their audit history; ``away`` sets a member out of office (until, from,
a delegate: tenants.services.away_set), as the member may over REST, and ``back`` ends it.
"""

from datetime import UTC
from urllib.parse import urlsplit

from django.core.exceptions import DisallowedHost
from django.core.management.base import BaseCommand, CommandError
from django.test import RequestFactory
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from config.site import site_url
from tenants.management.commands.tokens import shell_actor, tenant_named
from tenants.models import Membership, User
from tenants.services import (
    MemberError,
    away_clear,
    away_set,
    email_normalised,
    invitation_revoke,
    invitation_send,
    invitation_status,
    member_active_set,
    member_invite,
    membership_add,
    membership_remove,
    membership_role_set,
)


def site_base_url(base_url: str) -> str:
    """base_url, checked: the invitation's link points there, so its host must be served."""
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
    return f"{parts.scheme}://{parts.netloc}"


class Command(BaseCommand):
    help = "Add, invite, re-role, remove, set away or list a tenant's members."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        for action, text in (
            ("add", "Add a member (or give them a new role); no e-mail."),
            ("invite", "Add a member and e-mail them an invitation with a link to set a password."),
        ):
            cmd = sub.add_parser(action, help=text)
            cmd.add_argument("email")
            cmd.add_argument("--tenant", required=True, help="The tenant's slug.")
            cmd.add_argument(
                "--role", choices=[r.value for r in Membership.Role], default="operator"
            )
            cmd.add_argument(
                "--staff",
                action="store_true",
                help="May use Django admin (with --role admin: runs this tenant there).",
            )
            if action == "invite":
                self.base_url_argument(cmd)
                self.inviter_argument(cmd)
        resend = sub.add_parser("resend", help="Send a member's invitation again (a new link).")
        resend.add_argument("email")
        resend.add_argument("--tenant", required=True)
        self.base_url_argument(resend)
        self.inviter_argument(resend)
        role = sub.add_parser("role", help="Give a member another role.")
        role.add_argument("email")
        role.add_argument("--tenant", required=True)
        role.add_argument("--role", required=True, choices=[r.value for r in Membership.Role])
        remove = sub.add_parser(
            "remove",
            help="Take a member out of the tenant: their sessions end, the tenant's tokens "
            "that act for them are revoked, their audit history stays.",
        )
        remove.add_argument("email")
        remove.add_argument("--tenant", required=True)
        for name, text in (
            ("revoke", "Revoke a member's pending invitation: its link stops working."),
            ("deactivate", "Deactivate a member's account: they log in nowhere."),
            ("reactivate", "Reactivate a member's account."),
        ):
            cmd = sub.add_parser(name, help=text)
            cmd.add_argument("email")
            cmd.add_argument("--tenant", required=True)
        away = sub.add_parser(
            "away", help="Set a member out of office: told of nothing; a delegate told instead."
        )
        away.add_argument("email")
        away.add_argument("--tenant", required=True)
        away.add_argument("--until", required=True, help="Until when (ISO 8601, with a zone).")
        away.add_argument("--since", default="", help="From when (ISO 8601; default: now).")
        away.add_argument("--delegate", default="", help="The e-mail of a member who may decide.")
        back = sub.add_parser("back", help="End a member's out of office.")
        back.add_argument("email")
        back.add_argument("--tenant", required=True)
        listing = sub.add_parser("list", help="List a tenant's members.")
        listing.add_argument("--tenant", required=True)

    @staticmethod
    def base_url_argument(cmd) -> None:
        cmd.add_argument(
            "--base-url",
            default="",
            help="The site's address for the link (default: PUBLIC_BASE_URL, else "
            "NOTIFY_BASE_URL, else where the server listens: http://HOST:PORT).",
        )

    @staticmethod
    def inviter_argument(cmd) -> None:
        cmd.add_argument(
            "--by",
            default="",
            help="The e-mail address of the person inviting, named in the e-mail "
            "(default: 'an administrator of <tenant>').",
        )

    def handle(self, *args, **options):
        tenant = tenant_named(options["tenant"])
        action = options["action"]
        if action == "list":
            return self.handle_list(tenant)
        try:
            email = email_normalised(options["email"])
        except MemberError as exc:
            raise CommandError(str(exc)) from None
        base_url, inviter = "", None  # set for the commands that send an invitation
        if action in ("invite", "resend"):
            base = options["base_url"] or site_url()
            base_url = site_base_url(base.rstrip("/"))
            inviter = self.inviter(options["by"])
        try:
            if action == "add":
                membership, created = membership_add(
                    tenant=tenant,
                    email=email,
                    role=options["role"],
                    actor=shell_actor(),
                    staff=True if options["staff"] else None,
                )
            elif action == "invite":
                # What Django admin's "Add member" form does, with the shell's answer.
                membership, created = member_invite(
                    tenant=tenant,
                    email=email,
                    role=options["role"],
                    actor=shell_actor(),
                    by=inviter,
                    base_url=base_url,
                    staff=options["staff"],
                )
            else:
                membership = self.member(tenant, email)
            if action in ("add", "invite"):
                self.stdout.write(
                    f"{'Added' if created else 'Updated'} {email} as {options['role']} "
                    f"in {tenant.slug}."
                )
            if action == "invite":
                self.stdout.write(f"Sent an invitation to {email}.")
            elif action == "resend":
                invitation_send(
                    membership=membership, by=inviter, base_url=base_url, actor=shell_actor()
                )
                self.stdout.write(f"Sent an invitation to {email}.")
            elif action == "role":
                changed = membership_role_set(
                    membership=membership, role=options["role"], actor=shell_actor()
                )
                said = "is now" if changed else "was already"
                self.stdout.write(f"{email} {said} {options['role']} in {tenant.slug}.")
            elif action == "revoke":
                revoked = invitation_revoke(membership=membership, actor=shell_actor())
                self.stdout.write(
                    f"Revoked the invitation to {email}."
                    if revoked
                    else f"{email} has no pending invitation."
                )
            elif action in ("deactivate", "reactivate"):
                changed = member_active_set(
                    membership=membership,
                    active=action == "reactivate",
                    actor=shell_actor(),
                    platform=True,
                )
                said = "is now" if changed else "was already"
                self.stdout.write(f"{email} {said} {action}d.")
            elif action == "away":
                self.handle_away(tenant, membership, options)
            elif action == "back":
                away_clear(membership=membership, actor=shell_actor())
                self.stdout.write(f"{email} is back in {tenant.slug}.")
            elif action == "remove":
                done = membership_remove(membership=membership, actor=shell_actor())
                tokens = done["tokens_revoked"]
                self.stdout.write(
                    f"Removed {email} from {tenant.slug}: their sessions ended"
                    + (f", {tokens} token(s) acting for them revoked" if tokens else "")
                    + "; their audit history stays."
                )
        except MemberError as exc:
            raise CommandError(str(exc)) from None

    def handle_away(self, tenant, membership: Membership, options) -> None:
        def when(text: str, name: str):
            at = parse_datetime(text) if text else None
            if text and (at is None or at.tzinfo is None):
                raise CommandError(f"--{name}: {text!r} is not a time such as 2026-10-13T09:00Z.")
            return at

        delegate = self.member(tenant, options["delegate"]) if options["delegate"] else None
        until = when(options["until"], "until")
        away_set(
            membership=membership,
            until=until,
            starts=when(options["since"], "since"),
            delegate=delegate,
            actor=shell_actor(),
        )
        self.stdout.write(
            f"{membership.user.email} is away in {tenant.slug} until "
            f"{until.astimezone(UTC):%Y-%m-%d %H:%M}Z"
            + (f"; {delegate.user.email} is told instead." if delegate else ".")
        )

    def member(self, tenant, email: str) -> Membership:
        membership = (
            Membership.objects.select_related("user", "tenant")
            .filter(tenant=tenant, user__email__iexact=email)
            .first()
        )
        if membership is None:
            raise CommandError(f"{email} is not a member of {tenant.slug}.")
        return membership

    def inviter(self, email: str) -> User | None:
        if not email:
            return None
        user = User.objects.filter(email__iexact=email.strip()).first()
        if user is None:
            raise CommandError(f"--by: no account {email!r}.")
        return user

    def handle_list(self, tenant) -> None:
        members = Membership.objects.filter(tenant=tenant).select_related("user", "invited_by")
        self.stdout.write(f"{'e-mail':<40} {'role':<9} {'admin':<6} {'password':<9} invitation")
        now = timezone.now()
        for m in members:
            invited = (
                f"sent {m.invited_at:%Y-%m-%d %H:%M}Z"
                + (f" by {m.invited_by.email}" if m.invited_by else "")
                if m.invited_at
                else ""
            )
            invited = f"{invitation_status(m, now)} {invited}".strip()
            self.stdout.write(
                f"{m.user.email:<40} {m.role:<9} {'yes' if m.is_tenant_admin else 'no':<6} "
                f"{'set' if m.user.has_usable_password() else 'not set':<9} {invited}"
            )
