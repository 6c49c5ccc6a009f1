"""`python manage.py tenants create|list|deactivate|reactivate`: tenants from a shell."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenants.management.commands.tokens import shell_actor, tenant_named
from tenants.models import Tenant
from tenants.services import tenant_active_set


class Command(BaseCommand):
    help = "Create, list, deactivate or reactivate tenants."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create a tenant.")
        create.add_argument("slug", help="Its slug, in URLs: /a2a/<slug>/<agent>.")
        create.add_argument("--name", default="", help="Its display name (default: the slug).")
        create.add_argument(
            "--time-zone",
            default="",
            help="The IANA time zone its pages show times in (default: the site's TIME_ZONE).",
        )
        sub.add_parser("list", help="List tenants.")
        for action, text in (
            (
                "deactivate",
                "Deactivate a tenant: its tokens are refused, its agents answer that it is "
                "deactivated, its members reach none of its pages; nothing is deleted.",
            ),
            ("reactivate", "Reactivate a deactivated tenant."),
        ):
            sub.add_parser(action, help=text).add_argument("slug")

    def handle(self, *args, **options):
        if options["action"] == "list":
            for tenant in Tenant.objects.order_by("slug"):
                state = "active" if tenant.active else "inactive"
                since = (
                    f"  (deactivated {tenant.deactivated_at:%Y-%m-%d %H:%M}Z by "
                    f"{tenant.deactivated_by})"
                    if tenant.deactivated_at
                    else ""
                )
                self.stdout.write(f"{tenant.slug:<20} {state:<9} {tenant.name}{since}")
            return
        if options["action"] in ("deactivate", "reactivate"):
            tenant = tenant_named(options["slug"])
            active = options["action"] == "reactivate"
            changed = tenant_active_set(tenant=tenant, active=active, actor=shell_actor())
            word = "reactivated" if active else "deactivated"
            self.stdout.write(
                f"{word.capitalize()} {tenant.slug}."
                if changed
                else f"{tenant.slug} was already {word}."
            )
            return
        slug = options["slug"].strip()
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"Tenant {slug!r} exists already.")
        tenant = Tenant(
            slug=slug, name=(options["name"] or slug).strip(), time_zone=options["time_zone"]
        )
        try:
            tenant.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{f}: {' '.join(m)}" for f, m in exc.message_dict.items())
            raise CommandError(f"Tenant not created: {problems}") from None
        tenant.save()
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.name}).")
