from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from runtime.agents.agent_selectors import discovered_tools
from runtime.agents.agentfile import AgentFileError, agent_load, parse_agent_file
from tenants.management.commands.tokens import shell_actor
from tenants.models import Tenant

OUTCOMES = ("created", "updated", "replaced", "unchanged", "refused")


class Command(BaseCommand):
    help = (
        "Load AGENT.md files from a folder into a tenant (idempotent); report what changed. "
        "An agent whose policy was edited since a file last loaded it (in Django admin) is "
        "refused, with a diff, unless --replace is given."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory", help="A folder of AGENT.md files (*.md), or one file.")
        parser.add_argument("--tenant", required=True, help="The tenant's slug.")
        parser.add_argument(
            "--replace",
            action="store_true",
            help="Overwrite a policy edited since it was loaded with the file's (audited as "
            "a change; the edited version stays in the agent's policy history).",
        )

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
        actor = shell_actor()
        counts = dict.fromkeys(OUTCOMES, 0)
        with transaction.atomic():
            for spec in specs:
                done = agent_load(tenant=target, spec=spec, actor=actor, replace=options["replace"])
                counts[done.outcome] += 1
                self.stdout.write(f"{done.outcome:9} {tenant}/{spec.slug}  ({spec.source_path})")
                if done.outcome == "refused":
                    self.stdout.write(
                        f"  its policy was edited since it was loaded; kept as it is. The "
                        f"file's differs so:\n{done.diff}\n"
                        "  --replace overwrites it with the file's (audited; the edited "
                        "version stays in its history)."
                    )
        summary = (
            f"{len(specs)} agent(s): {counts['created']} created, {counts['updated']} updated, "
            f"{counts['unchanged']} unchanged"
        )
        if counts["replaced"]:
            summary += f", {counts['replaced']} replaced (edited policy overwritten: --replace)"
        if counts["refused"]:
            summary += (
                f", {counts['refused']} refused (policy edited since loaded; kept, "
                "--replace to overwrite)"
            )
        self.stdout.write(summary)
