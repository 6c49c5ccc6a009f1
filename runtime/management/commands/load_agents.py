from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from runtime.agents.agent_selectors import discovered_tools
from runtime.agents.agentfile import AgentFileError, agent_upsert, parse_agent_file
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Load AGENT.md files from a folder into a tenant (idempotent); report what changed."

    def add_arguments(self, parser):
        parser.add_argument("directory", help="A folder of AGENT.md files (*.md), or one file.")
        parser.add_argument("--tenant", required=True, help="The tenant's slug.")

    def handle(self, directory, tenant, **options):
        target = Tenant.objects.filter(slug=tenant).first()
        if target is None:
            raise CommandError(f"No tenant {tenant!r}.")
        path = Path(directory)
        files = [path] if path.is_file() else sorted(path.glob("*.md"))
        if not files:
            raise CommandError(f"No *.md files in {directory}.")
        specs = []
        # A condition on a tool of the tenant's tool servers is checked against the schema
        # their last discovery found ("Refresh tools"), as a declared tool's is.
        discovered = discovered_tools(tenant=target)
        for file in files:
            try:
                specs.append(parse_agent_file(file, discovered=discovered))
            except AgentFileError as exc:
                raise CommandError(str(exc)) from exc
        counts = {"created": 0, "updated": 0, "unchanged": 0}
        with transaction.atomic():
            for spec in specs:
                _, outcome = agent_upsert(tenant=target, spec=spec)
                counts[outcome] += 1
                self.stdout.write(f"{outcome:9} {tenant}/{spec.slug}  ({spec.source_path})")
        self.stdout.write(
            f"{len(specs)} agent(s): {counts['created']} created, {counts['updated']} updated, {counts['unchanged']} unchanged"
        )
