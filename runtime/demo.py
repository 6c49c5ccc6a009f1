"""The demo agents that seed_demo loads into tenant `demo` (the AGENT.md files beside this)."""

from pathlib import Path

from runtime.agentfile import parse_agent_file
from runtime.services.agents import agent_upsert

AGENTS_DIR = Path(__file__).resolve().parent / "agents"


def seed_demo_agents(*, tenant) -> list[str]:
    slugs = []
    for path in sorted(AGENTS_DIR.glob("*.md")):
        spec = parse_agent_file(path)
        agent_upsert(tenant=tenant, spec=spec)
        slugs.append(spec.slug)
    return slugs
