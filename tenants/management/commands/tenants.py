"""`python manage.py tenants create|list`: tenants from a shell."""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from tenants.models import Tenant


class Command(BaseCommand):
    help = "Create or list tenants."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create a tenant.")
        create.add_argument("slug", help="Its slug, in URLs: /a2a/<slug>/<agent>.")
        create.add_argument("--name", default="", help="Its display name (default: the slug).")
        sub.add_parser("list", help="List tenants.")

    def handle(self, *args, **options):
        if options["action"] == "list":
            for tenant in Tenant.objects.order_by("slug"):
                state = "active" if tenant.active else "inactive"
                self.stdout.write(f"{tenant.slug:<20} {state:<9} {tenant.name}")
            return
        slug = options["slug"].strip()
        if Tenant.objects.filter(slug=slug).exists():
            raise CommandError(f"Tenant {slug!r} exists already.")
        tenant = Tenant(slug=slug, name=(options["name"] or slug).strip())
        try:
            tenant.full_clean()
        except ValidationError as exc:
            problems = "; ".join(f"{f}: {' '.join(m)}" for f, m in exc.message_dict.items())
            raise CommandError(f"Tenant not created: {problems}") from None
        tenant.save()
        self.stdout.write(f"Created tenant {tenant.slug} ({tenant.name}).")
