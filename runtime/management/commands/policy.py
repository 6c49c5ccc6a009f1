"""`python manage.py policy replay AGENT --policy FILE [--tenant T] [--since 30d] [--until ...]`:
what a draft tool policy would have done with the agent's recorded calls, beside what
happened (runtime.decisions.replay): counts, who the draft would hold calls for, and the
calls that would change. FILE holds the policy as YAML or JSON: the mapping itself, a
mapping with ``policy:``, or an agent file (AGENT.md) whose front matter has one."""

from pathlib import Path

import yaml
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from runtime.agents.agent_models import Agent
from runtime.decisions.replay import DraftPolicyError, policy_replay
from runtime.management.commands.evidence import moment
from tenants.management.commands.tokens import tenant_named

LISTED = 50


def draft_read(path: str) -> dict:
    """The policy in the file at ``path`` (see the module)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"--policy {path}: {exc.strerror or exc}") from exc
    if text.startswith("---"):
        text = text.split("---", 2)[1]  # an agent file's front matter
    try:
        found = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CommandError(f"--policy {path} is not YAML or JSON: {exc}") from exc
    if isinstance(found, dict) and isinstance(found.get("policy"), dict):
        found = found["policy"]
    if not isinstance(found, dict):
        raise CommandError(f"--policy {path} holds no policy mapping")
    return found


class Command(BaseCommand):
    help = "Replay a draft tool policy over an agent's recorded calls."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        replay = sub.add_parser("replay", help="What a draft policy would have done.")
        replay.add_argument("agent", help="The agent's slug (or tenant/agent).")
        replay.add_argument("--policy", required=True, help="The draft policy's file.")
        replay.add_argument("--tenant", default="", help="The tenant's slug.")
        replay.add_argument("--since", default="30d", help="From (30d, 2026-11-01, ISO time).")
        replay.add_argument("--until", default="", help="Until, not included (default: now).")
        replay.add_argument(
            "--all", action="store_true", help=f"List every changed call (else {LISTED})."
        )

    def handle(self, *args, **options):
        slug = options["agent"]
        tenant_slug = options["tenant"]
        if "/" in slug:
            tenant_slug, _, slug = slug.partition("/")
        if not tenant_slug:
            raise CommandError("Name the tenant: --tenant T, or tenant/agent.")
        tenant = tenant_named(tenant_slug)
        agent = Agent.objects.filter(tenant=tenant, slug=slug).first()
        if agent is None:
            raise CommandError(f"No agent {slug!r} in {tenant.slug}.")
        policy = draft_read(options["policy"])
        since = moment(options["since"], name="since")
        until = moment(options["until"], name="until") if options["until"] else timezone.now()
        try:
            report = policy_replay(agent=agent, policy=policy, since=since, until=until)
        except DraftPolicyError as exc:
            raise CommandError(
                "The draft policy does not load: " + "; ".join(exc.problems)
            ) from exc
        write = self.stdout.write
        write(
            f"{report.calls} recorded calls of {tenant.slug}/{agent.slug} from {since:%Y-%m-%d %H:%M} UTC"
        )
        write(f"{'':10}{'happened':>10}{'draft':>10}")
        for outcome in ("allowed", "held", "refused"):
            write(f"{outcome:10}{report.recorded[outcome]:>10}{report.draft[outcome]:>10}")
        for who, count in sorted(report.held_by.items(), key=lambda item: -item[1]):
            write(f"  held for {who}: {count}")
        write(f"{len(report.changed)} calls would change")
        shown = report.changed if options["all"] else report.changed[:LISTED]
        for call in shown:
            held = f" ({call.held_by})" if call.held_by else ""
            write(
                f"  {call.effect_id} {call.server}/{call.tool} task {call.task_id} "
                f"{call.at:%Y-%m-%d %H:%M}: {call.was} -> {call.would}{held}"
            )
        if len(shown) < len(report.changed):
            write(f"  … {len(report.changed) - len(shown)} more (--all lists them)")
