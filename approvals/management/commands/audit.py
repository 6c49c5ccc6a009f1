"""`python manage.py audit verify --tenant T`: check a tenant's audit chain in place
(runtime.kernel.audit_chain) and name the first row that breaks it. Exit status 1 when one
does."""

from django.core.management.base import BaseCommand, CommandError

from runtime.kernel.audit_chain import audit_chain_verify
from tenants.management.commands.tokens import tenant_named


class Command(BaseCommand):
    help = "Check a tenant's audit chain: no row removed or changed since it was written."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser("verify", help="Check the tenant's audit chain in place.")
        verify.add_argument("--tenant", required=True, help="The tenant's slug.")

    def handle(self, *args, **options):
        tenant = tenant_named(options["tenant"])
        check = audit_chain_verify(tenant=tenant)
        if not check.holds:
            raise CommandError(
                f"The audit chain of {tenant.slug} breaks after {check.rows} rows: "
                f"{check.problem}.",
                returncode=1,
            )
        self.stdout.write(f"The audit chain of {tenant.slug} holds: {check.rows} rows.")
