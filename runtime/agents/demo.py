"""The demo agents that seed_demo loads into tenant `demo` (the AGENT.md files beside this),
and, when an OpenAI-compatible model is configured, the `assistant` on that model."""

import logging
import os
from pathlib import Path

from runtime.agents.agentfile import AgentSpec, agent_load, parse_agent_file
from runtime.llm.credentials import CredentialMissing, credential_value

AGENTS_DIR = Path(__file__).resolve().parent

logger = logging.getLogger(__name__)

ASSISTANT = "assistant"
ASSISTANT_CREDENTIAL = "OPENAI_API_KEY"
ASSISTANT_DEFAULT_MODEL = "gpt-4o-mini"
# The demo agents whose tools (with their schemas) and policies the assistant takes over,
# so that its calls are held for approval exactly as theirs are.
ASSISTANT_TOOLS_FROM = ("deployer", "coder")

ASSISTANT_INSTRUCTIONS = """\
You are the assistant of Demo Co's engineering team. You act through your tools; never claim
to have done something that you did not do with a tool.

- To deploy a build, call deploy / deploy_build with the build and the environment (staging or
  production). If either is missing from the request, ask with ask_question first.
- To change a repository, call github / create_pull_request with the repository and a short
  title. If GitHub is not connected, call request_connection for the app "github" first.
- Each deployment and each pull request waits for a person's approval. If a call is denied,
  tell the caller it was not done and why (the reason you were given); do not retry it.
- An operator may change a call's arguments before approving it: then tell the caller what was
  actually done, from the tool's result and the arguments sent, not what was asked for.
- For work of several steps, keep the plan current with update_plan.
- Answer other questions briefly, in plain words."""


# Who the audit names for the demo seed's changes.
SEED_ACTOR = "system:seed_demo"


def seed_demo_agents(*, tenant, kept: list[str] | None = None) -> list[str]:
    """Load the demo agents into ``tenant``; return their slugs. An agent whose policy was
    edited since the seed last loaded it (in admin) keeps it: its slug is added to ``kept``
    and a warning with the diff is logged. The seed never overwrites an edit."""
    specs = [parse_agent_file(path) for path in sorted(AGENTS_DIR.glob("*.md"))]
    assistant = assistant_spec(tenant=tenant)
    if assistant is not None:
        specs.append(assistant)
    for spec in specs:
        done = agent_load(tenant=tenant, spec=spec, actor=SEED_ACTOR)
        if done.outcome == "refused":
            logger.warning(
                "demo agent %s kept its policy, edited since it was loaded "
                "(load_agents --replace overwrites it):\n%s",
                spec.slug,
                done.diff,
            )
            if kept is not None:
                kept.append(spec.slug)
    return [spec.slug for spec in specs]


def assistant_spec(*, tenant) -> AgentSpec | None:
    """The `assistant` agent on an OpenAI-compatible model, or None without a key.

    The key is OPENAI_API_KEY, the tenant's own (Django admin, "Credentials") or the
    environment's. Without one an assistant seeded earlier is left as it is, not deleted:
    its tasks and audit rows stay, and its turns fail saying the credential is not set.
    The mapping names no base_url: the provider takes OPENAI_BASE_URL from the environment,
    the installer's trusted configuration (which may point at a model server on loopback).
    """
    try:
        credential_value(tenant=tenant, name=ASSISTANT_CREDENTIAL)
    except CredentialMissing:
        return None
    donors = {slug: parse_agent_file(AGENTS_DIR / f"{slug}.md") for slug in ASSISTANT_TOOLS_FROM}
    return AgentSpec(
        slug=ASSISTANT,
        name=ASSISTANT,
        description="A real model (OpenAI-compatible) that deploys builds and opens pull "
        "requests; each deployment and each pull request waits for a person's approval.",
        skills=[skill for donor in donors.values() for skill in donor.skills],
        # Several skills: a message without metadata.skillId (the banner's command, most
        # clients) runs the first donor's: with a default, the caller need not choose.
        default_skill=next(iter(donors.values())).skills[0]["id"],
        instructions=ASSISTANT_INSTRUCTIONS,
        model={
            "provider": "openai",
            "model": os.environ.get("OPENAI_MODEL") or ASSISTANT_DEFAULT_MODEL,
            "credential": ASSISTANT_CREDENTIAL,
        },
        tools=[tool for donor in donors.values() for tool in donor.tools],
        tool_policy={
            key: operators_decide(rule)
            for donor in donors.values()
            for key, rule in donor.tool_policy.items()
        },
        connections_enabled=True,
        source_path="",
    )


def operators_decide(rule):
    """A donor's policy entry with the default deciders: the coder shows in-band approval
    (``deciders: either``); a real model's calls wait for the tenant's operators."""
    if isinstance(rule, list):
        # A conditional entry's rules stay mappings (a rule is never a bare decision).
        return [{k: v for k, v in each.items() if k != "deciders"} for each in rule]
    if not isinstance(rule, dict):
        return rule
    rule = {k: v for k, v in rule.items() if k != "deciders"}
    return rule["action"] if set(rule) == {"action"} else rule
