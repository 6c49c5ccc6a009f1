"""`python manage.py audit verify --tenant T`: check a tenant's audit chain in place
(runtime.kernel.audit_chain) and name the first row that breaks it. Exit status 1 when one
does. `python manage.py audit prune [--tenant T]`: remove the rows past the tenant's
retention now (runtime.kernel.audit_prune; beat does it daily)."""

from django.core.management.base import BaseCommand, CommandError

from runtime.kernel.audit_chain import audit_chain_verify, chain_start
from runtime.kernel.audit_prune import AuditPruneRefused, audit_prune
from tenants.management.commands.tokens import tenant_named
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Check a tenant's audit chain: no row removed or changed since it was written."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        verify = sub.add_parser("verify", help="Check the tenant's audit chain in place.")
        verify.add_argument("--tenant", required=True, help="The tenant's slug.")
        prune = sub.add_parser(
            "prune", help="Remove the audit rows past the retention the tenant set."
        )
        prune.add_argument("--tenant", help="The tenant's slug (default: every tenant).")

    def handle(self, *args, **options):
        if options["action"] == "prune":
            return self.prune(options.get("tenant"))
        tenant = tenant_named(options["tenant"])
        check = audit_chain_verify(tenant=tenant)
        if not check.holds:
            raise CommandError(
                f"The audit chain of {tenant.slug} breaks after {check.rows} rows: "
                f"{check.problem}.",
                returncode=1,
            )
        first, _ = chain_start(tenant=tenant)
        since = f" from row {first} (the rows before it were pruned)" if first > 1 else ""
        self.stdout.write(f"The audit chain of {tenant.slug} holds: {check.rows} rows{since}.")

    def prune(self, slug: str | None) -> None:
        tenants = [tenant_named(slug)] if slug else Tenant.objects.order_by("slug")
        failed = False
        for tenant in tenants:
            if not tenant.audit_retention_days:
                if slug:
                    self.stdout.write(f"{tenant.slug} keeps its audit for ever: nothing pruned.")
                continue
            try:
                removed = audit_prune(tenant=tenant)
            except AuditPruneRefused as exc:
                self.stderr.write(f"Not pruned: {exc}.")
                failed = True
                continue
            self.stdout.write(
                f"{tenant.slug}: pruned {removed} audit rows older than "
                f"{tenant.audit_retention_days} days."
            )
        if failed:
            raise CommandError("Some audit chains were not pruned (see above).", returncode=1)
