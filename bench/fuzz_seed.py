"""Seed what the decision-channel fuzzers aim at, in the database of a server you run, and
print it as one JSON object (bench/fuzz_slack.py, fuzz_groups.py and fuzz_email.py read it
with ``--seed-file``).

In the demo tenant (it runs ``seed_demo`` first: new partner and operator tokens), it makes:
the tenant's Slack app with a signing secret of its own; N held approvals of the demo
``deployer``; N questions with choices (an agent ``fuzz-chooser``); N approval groups of two
held deploys each (an agent ``fuzz-planner`` on a hosted model, played here by the tests'
local OpenAI-compatible stub, tests/llm_stub.py); and an e-mail link for the demo operator
for every approval. The turns run here, in this process, up to their pause; what a decision
later resumes runs in the server's worker (give it ``OPENAI_BASE_URL=http://127.0.0.1:9/v1``
so that a resumed planner stays on loopback).

    DEBUG=true DATABASE_URL=... CELERY_BROKER_URL=... \\
        .venv/bin/python bench/fuzz_seed.py --n 20 > var/fuzz/seed.json
"""

import argparse
import json
import os
import secrets
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from io import StringIO  # noqa: E402

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from integrations.email.links import email_link_mint  # noqa: E402
from integrations.slack.settings import slack_app_save  # noqa: E402
from runtime.agents.agent_models import Agent  # noqa: E402
from runtime.agents.agentfile import AgentSpec, agent_upsert  # noqa: E402
from runtime.decisions.decision_models import Interaction  # noqa: E402
from runtime.decisions.decision_selectors import held_call_of  # noqa: E402
from runtime.turn.intake import message_send  # noqa: E402
from runtime.turn.runner import turn_run  # noqa: E402
from tenants.management.commands.seed_demo import DEMO_OPERATOR  # noqa: E402
from tenants.models import Membership, Tenant  # noqa: E402
from tests.core import CHOOSER, DEPLOY_TOOL  # noqa: E402
from tests.llm_stub import LLMStub, call, completion  # noqa: E402

SUBJECT = "partner:demo-client"
SLACK_BOT_TOKEN = "xoxb-1234567890-fuzz-token"
MAIN_SKILL = [{"id": "main", "name": "Main", "description": "d", "tags": [], "examples": []}]


def paused(tenant: Tenant, slug: str, text: str) -> list[Interaction]:
    """A new task of ``slug`` run here until it pauses: its open interactions."""
    agent = Agent.objects.get(tenant=tenant, slug=slug)
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": text}]}
    task = message_send(tenant=tenant, agent=agent, subject=SUBJECT, message=message).task
    turn_run(task_pk=task.pk, worker_id=f"fuzz-seed-{os.getpid()}")
    return list(
        Interaction.objects.filter(task=task, state=Interaction.State.OPEN).order_by(
            "group_position", "pk"
        )
    )


def held(interaction: Interaction) -> dict:
    call_row = held_call_of(interaction)
    return {"id": interaction.public_id, "hash": call_row.arguments_hash if call_row else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="of each kind of item")
    args = parser.parse_args()

    out = StringIO()
    call_command("seed_demo", "--json", stdout=out)
    demo = json.loads(out.getvalue())
    tenant = Tenant.objects.get(slug=demo["tenant"])
    membership = Membership.objects.get(tenant=tenant, user__email=DEMO_OPERATOR)

    signing_secret = secrets.token_hex(16)
    slack_app_save(tenant=tenant, bot_token=SLACK_BOT_TOKEN, signing_secret=signing_secret)

    agent_upsert(
        tenant=tenant,
        spec=AgentSpec(
            slug="fuzz-chooser",
            name="fuzz-chooser",
            description="Asks which environment.",
            skills=MAIN_SKILL,
            model={"provider": "scripted", "script": [{"steps": CHOOSER}]},
        ),
    )
    agent_upsert(
        tenant=tenant,
        spec=AgentSpec(
            slug="fuzz-planner",
            name="fuzz-planner",
            description="Deploys builds, several in one reply.",
            skills=MAIN_SKILL,
            instructions="You deploy builds.",
            model={"provider": "openai", "model": "gpt-4o-mini"},
            tools=[DEPLOY_TOOL],
            tool_policy={"deploy/deploy_build": "approve"},
        ),
    )

    approvals = [
        held(i)
        for n in range(args.n)
        for i in paused(tenant, "deployer", f"deploy build b-{n} to staging")
    ]
    questions = [
        {"id": i.public_id, "choices": len((i.request or {}).get("choices") or [])}
        for _ in range(args.n)
        for i in paused(tenant, "fuzz-chooser", "where to?")
    ]
    stub = LLMStub().start()
    os.environ["OPENAI_API_KEY"] = "sk-fuzz-" + "x" * 24
    settings.OPENAI_BASE_URL = stub.url
    groups = []
    try:
        for n in range(args.n):
            stub.play(
                completion(
                    calls=[
                        call("deploy__deploy_build", {"build": f"b-{n}", "environment": "staging"}),
                        call(
                            "deploy__deploy_build", {"build": f"b-{n}", "environment": "production"}
                        ),
                    ]
                ),
            )
            members = paused(tenant, "fuzz-planner", f"deploy b-{n} to staging and production")
            if members and members[0].group_id:
                groups.append(
                    {"id": members[0].group_id, "interactions": [held(m) for m in members]}
                )
    finally:
        stub.stop()

    email_tokens = []
    for item in approvals + [m for g in groups for m in g["interactions"]]:
        interaction = Interaction.objects.get(tenant=tenant, public_id=item["id"])
        urls = email_link_mint(interaction=interaction, membership=membership, email=DEMO_OPERATOR)
        email_tokens.append(urls["approve"].rstrip("/").split("/")[-2])

    print(
        json.dumps(
            {
                "tenant": tenant.slug,
                "token": demo["token"],
                "operator_token": demo["operator_token"],
                "operator_email": DEMO_OPERATOR,
                "slack": {"bot_token": SLACK_BOT_TOKEN, "signing_secret": signing_secret},
                "approvals": approvals,
                "questions": questions,
                "groups": groups,
                "email_tokens": email_tokens,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
