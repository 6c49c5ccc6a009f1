"""load_agents: AGENT.md files into a tenant, idempotently; a broken file is named with its
line and field so it can be fixed in one go."""

import pytest
from django.core.management import CommandError

from runtime.agents.agent_models import Agent
from runtime.policy.lookup import policy_for
from tests.core import load_agents

pytestmark = pytest.mark.django_db

GOOD = """---
name: helper
description: Helps.
skills:
  - id: help
    name: Help
    description: Helps with anything.
policy:
  deploy/deploy_build: approve
model:
  provider: scripted
  script:
    - steps:
        - reply: "Hi."
---
Be helpful.
"""


def test_load_agents_is_idempotent_and_reports_what_changed(world, tmp_path):
    (tmp_path / "helper.md").write_text(GOOD)
    (tmp_path / "other.md").write_text(GOOD.replace("name: helper", "name: other"))
    first = load_agents(tmp_path)
    assert "2 agent(s): 2 created, 0 updated, 0 unchanged" in first
    agent = Agent.objects.get(tenant=world.a.tenant, slug="helper")
    assert agent.instructions == "Be helpful."
    assert agent.skills[0]["id"] == "help"
    assert "2 agent(s): 0 created, 0 updated, 2 unchanged" in load_agents(tmp_path)
    (tmp_path / "helper.md").write_text(GOOD.replace("Helps.", "Helps more."))
    third = load_agents(tmp_path)
    assert "2 agent(s): 0 created, 1 updated, 1 unchanged" in third
    assert "updated   acme/helper" in third
    assert Agent.objects.get(tenant=world.a.tenant, slug="helper").description == "Helps more."
    assert Agent.objects.filter(tenant=world.a.tenant).count() == 2
    assert not Agent.objects.filter(tenant=world.b.tenant).exists()


def test_load_agents_loads_the_demo_agents(world):
    from runtime.agents.demo import AGENTS_DIR

    # The demo agents, the demo gate and the demo MCP gateway.
    assert "7 agent(s): 7 created" in load_agents(AGENTS_DIR, tenant="globex")


def test_load_agents_needs_a_known_tenant_and_some_files(world, tmp_path):
    with pytest.raises(CommandError, match="No tenant 'nope'"):
        load_agents(tmp_path, tenant="nope")
    with pytest.raises(CommandError, match=r"No \*\.md files"):
        load_agents(tmp_path)


@pytest.mark.parametrize(
    "old, new, line, field",
    [
        ("name: helper\n", "", 2, "name"),
        ("name: helper\n", "name: Helper Bot!\nslug: Not A Slug\n", 3, "slug"),
        ("description: Helps.\n", "description:\n", 3, "description"),
        (
            "skills:\n  - id: help\n",
            "skills:\n  - id: help\n    tags: notalist\n",
            6,
            "skills.0.tags",
        ),
        ("    description: Helps with anything.\n", "", 5, "skills.0.description"),
        ("skills:\n", "skills: 3\nx:\n", 4, "skills"),
        (
            "deploy/deploy_build: approve",
            "deploy/deploy_build: maybe",
            9,
            "policy.deploy/deploy_build",
        ),
        (
            "deploy/deploy_build: approve",
            "deploy/deploy_build: {action: approve, deciders: anyone}",
            9,
            "policy.deploy/deploy_build.deciders",
        ),
        (
            "deploy/deploy_build: approve",
            "deploy/deploy_build: {action: approve, bulk: sometimes}",
            9,
            "policy.deploy/deploy_build.bulk",
        ),
        (
            "policy:\n",
            "tools:\n  - {server: deploy, tool: deploy_build, risk: HIGH}\npolicy:\n",
            9,
            "tools.0.risk",
        ),
        (
            "deploy/deploy_build: approve",
            "deploy/deploy_build: {action: allow, timeout: soon}",
            9,
            "policy.deploy/deploy_build.timeout",
        ),
        (
            "deploy/deploy_build: approve",
            "deploy/deploy_build: {action: allow, timeout: 2h}",
            9,
            "policy.deploy/deploy_build.timeout",
        ),
        (
            "deploy/deploy_build: approve",
            "deploy/deploy_build: {action: approve, deciders: caller, approvers: [admin]}",
            9,
            "policy.deploy/deploy_build.deciders",
        ),
        ('        - reply: "Hi."', "        - dance: true", 14, "model.script.0.steps.0"),
        (
            '        - reply: "Hi."',
            "        - ask: {prompt: no id}",
            14,
            "model.script.0.steps.0.ask",
        ),
        ("provider: scripted", "provider: nonesuch", 11, "model.provider"),
        ("description: Helps.\n", "description: [unclosed\n", 4, "front matter"),
        ("description: Helps.\n", "description: Helps.\n  bad: indent: here\n", 4, "front matter"),
    ],
    ids=[
        "missing-name",
        "bad-slug",
        "missing-description",
        "bad-skill-tags",
        "skill-without-description",
        "skills-not-a-list",
        "bad-policy-action",
        "bad-deciders",
        "bad-bulk",
        "bad-tool-risk",
        "bad-timeout",
        "timeout-too-long",
        "deciders-caller-and-approvers",
        "bad-script-step",
        "ask-without-id",
        "unknown-provider",
        "yaml-syntax-unclosed",
        "yaml-syntax-indent",
    ],
)
def test_a_broken_agent_file_names_its_file_line_and_field(world, tmp_path, old, new, line, field):
    assert old in GOOD
    path = tmp_path / "broken.md"
    path.write_text(GOOD.replace(old, new, 1))
    (tmp_path / "fine.md").write_text(GOOD.replace("name: helper", "name: fine"))
    with pytest.raises(CommandError) as caught:
        load_agents(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: {field}: "), message
    # Nothing is loaded from a folder with a broken file.
    assert not Agent.objects.exists()


@pytest.mark.parametrize(
    "text, line",
    [("name: x\n", 1), ("---\nname: x\ndescription: y\n", 3)],
    ids=["no-opening", "no-closing"],
)
def test_front_matter_fences_are_required(world, tmp_path, text, line):
    path = tmp_path / "x.md"
    path.write_text(text)
    with pytest.raises(CommandError, match=rf"^{path}:{line}: front matter: "):
        load_agents(path)


BILLION_LAUGHS = """---
name: laughs
description: 542 bytes of nested aliases were 5.2 MB once written out.
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]
---
"""


@pytest.mark.parametrize(
    "text, line",
    [
        (BILLION_LAUGHS, 4),
        ("---\nname: x\ndescription: &d Helps.\nversion: *d\n---\n", 3),
        (
            "---\nname: x\ndescription: y\nbase: &b {a: 1}\nmodel: {<<: *b, provider: scripted}\n---\n",
            4,
        ),
    ],
    ids=["nested", "scalar", "merge-key"],
)
def test_yaml_aliases_are_refused_before_anything_is_built(world, tmp_path, text, line):
    path = tmp_path / "alias.md"
    path.write_text(text)
    with pytest.raises(CommandError) as caught:
        load_agents(path)
    assert str(caught.value) == (
        f"{path}:{line}: front matter: YAML anchors and aliases (&name, *name) are not "
        "allowed: write the value out where it is used"
    )
    assert not Agent.objects.exists()


OPENAI = """---
name: assistant
description: A hosted model.
model:
  provider: openai
  model: gpt-4o-mini
  base_url: https://llm.example.com/v1
  credential: ACME_LLM_KEY
  temperature: 0.3
  max_output_tokens: 500
loop:
  connections: true
  limits: {steps: 10, tool_calls: 4, tokens: 20000}
---
You help.
"""


def test_an_openai_agent_file_loads_with_its_model_and_limits(world, tmp_path):
    (tmp_path / "assistant.md").write_text(OPENAI)
    load_agents(tmp_path)
    agent = Agent.objects.get(tenant=world.a.tenant, slug="assistant")
    assert agent.model == {
        "provider": "openai",
        "model": "gpt-4o-mini",
        "base_url": "https://llm.example.com/v1",
        "credential": "ACME_LLM_KEY",
        "temperature": 0.3,
        "max_output_tokens": 500,
        "limits": {"steps": 10, "tool_calls": 4, "tokens": 20000},
    }
    assert agent.instructions == "You help."
    assert agent.connections_enabled


def test_an_openai_agent_file_loads_its_parameters_memory_and_policy_fields(world, tmp_path):
    text = OPENAI.replace(
        "  max_output_tokens: 500\n",
        "  max_output_tokens: 500\n"
        "  max_tokens_field: max_tokens\n"
        "  reasoning_effort: low\n"
        "  top_p: 0.9\n"
        "  seed: 42\n"
        "  stop: [END]\n"
        "  parallel_tool_calls: false\n"
        "  extra_body: {metadata: {team: release}}\n",
    ).replace("loop:\n", "memory: {turns: 5, tokens: 2000}\nloop:\n")
    text = text.replace("tokens: 20000}", "tokens: 20000, bad_replies: 0, tool_result_bytes: 4096}")
    text = text.replace(
        "---\nYou help.",
        "tools:\n  - {server: deploy, tool: deploy_build}\n"
        "policy:\n  deploy/deploy_build: {action: approve, deciders: caller, timeout: 90s}\n"
        "---\nYou help.",
    )
    (tmp_path / "assistant.md").write_text(text)
    load_agents(tmp_path)
    agent = Agent.objects.get(tenant=world.a.tenant, slug="assistant")
    assert agent.model["reasoning_effort"] == "low"
    assert agent.model["extra_body"] == {"metadata": {"team": "release"}}
    assert agent.model["max_tokens_field"] == "max_tokens"
    assert agent.model["memory"] == {"turns": 5, "tokens": 2000}
    assert agent.model["limits"]["bad_replies"] == 0
    policy = policy_for(agent, "deploy", "deploy_build", {})
    assert (policy.approvers, policy.deciders, policy.timeout) == (("caller",), "either", 90.0)
    assert policy_for(agent, "deploy", "other", {}).deciders == "operators"  # the default


@pytest.mark.parametrize(
    "old, new, line, field",
    [
        ("  model: gpt-4o-mini\n", "", 5, "model.model"),
        ("  model: gpt-4o-mini", "  model: 4", 6, "model.model"),
        ("https://llm.example.com/v1", "ftp://llm.example.com/v1", 7, "model.base_url"),
        ("https://llm.example.com/v1", "https://user:pw@llm.example.com/v1", 7, "model.base_url"),
        ("ACME_LLM_KEY", "'my key'", 8, "model.credential"),
        ("temperature: 0.3", "temperature: 3", 9, "model.temperature"),
        ("max_output_tokens: 500", "max_output_tokens: 0", 10, "model.max_output_tokens"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  top_k: 3", 11, "model.top_k"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  reasoning_effort: max", 11, "model.reasoning_effort"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  top_p: 2", 11, "model.top_p"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  seed: x", 11, "model.seed"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  stop: [a, b, c, d, e]", 11, "model.stop"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  parallel_tool_calls: no-thanks", 11, "model.parallel_tool_calls"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  max_tokens_field: max_length", 11, "model.max_tokens_field"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  extra_body: {messages: []}", 11, "model.extra_body.messages"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  extra_body: {top_p: 1}", 11, "model.extra_body.top_p"),
        ("max_output_tokens: 500", "max_output_tokens: 500\n  extra_body: {when: 2026-10-06}", 11, "model.extra_body"),
        ("provider: openai", "provider: openai-responses\n  stop: END", 6, "model.stop"),
        ("steps: 10", "steps: 0", 13, "loop.limits.steps"),
        ("tokens: 20000", "tokens: lots", 13, "loop.limits.tokens"),
        ("tokens: 20000", "tokens: 2, minutes: 3", 13, "loop.limits.minutes"),
        ("limits: {steps: 10, tool_calls: 4, tokens: 20000}", "limits: 5", 13, "loop.limits"),
        ("tokens: 20000", "tokens: 20000, bad_replies: -1", 13, "loop.limits.bad_replies"),
        ("tokens: 20000", "tokens: 20000, tool_result_bytes: 10", 13, "loop.limits.tool_result_bytes"),
        ("loop:\n", "memory: {turns: many}\nloop:\n", 11, "memory.turns"),
        ("loop:\n", "memory: {turns: 5, weeks: 2}\nloop:\n", 11, "memory.weeks"),
        ("loop:\n", "memory: 5\nloop:\n", 11, "memory"),
        ("  max_output_tokens: 500\n", "  max_output_tokens: 500\n  memory: {turns: 2}\n", 11, "model.memory"),
    ],
    ids=[
        "no-model",
        "model-not-a-string",
        "base-url-scheme",
        "base-url-credentials",
        "credential-name",
        "temperature",
        "max-output-tokens",
        "unknown-field",
        "reasoning-effort",
        "top-p",
        "seed",
        "stop",
        "parallel-tool-calls",
        "max-tokens-field",
        "extra-body-reserved",
        "extra-body-named-parameter",
        "extra-body-not-json",
        "responses-has-no-stop",
        "limit-zero",
        "limit-not-a-number",
        "unknown-limit",
        "limits-not-a-mapping",
        "bad-replies-negative",
        "tool-result-bytes-too-small",
        "memory-turns-not-a-number",
        "memory-unknown-field",
        "memory-not-a-mapping",
        "memory-under-model",
    ],
)  # fmt: skip
def test_a_broken_openai_agent_file_names_its_line_and_field(
    world, tmp_path, old, new, line, field
):
    assert old in OPENAI
    path = tmp_path / "broken.md"
    path.write_text(OPENAI.replace(old, new, 1))
    with pytest.raises(CommandError) as caught:
        load_agents(tmp_path)
    assert str(caught.value).startswith(f"{path}:{line}: {field}: "), str(caught.value)
    assert not Agent.objects.exists()


WITH_TOOL = GOOD.replace(
    "policy:\n",
    """tools:
  - server: deploy
    tool: deploy_build
    schema:
      type: object
      properties:
        build: {type: string}
policy:
""",
)


@pytest.mark.parametrize(
    "old, new, line, field, message",
    [
        ("        build: {type: string}", "        build: {type: 12}", 14, "tools.0.schema.properties.build.type", "is not a valid JSON Schema"),
        ("      type: object\n", "      type: 12\n", 12, "tools.0.schema.type", "is not a valid JSON Schema"),
        ("      properties:\n", "      required: notalist\n      properties:\n", 13, "tools.0.schema.required", "is not a valid JSON Schema"),
        ("    schema:\n", "    schema: [1]\n    x:\n", 11, "tools.0.schema", "must be a JSON schema object"),
        ("  - server: deploy\n", "  - server: ''\n", 9, "tools.0.server", "is required"),
        ("name: helper\n", "name: helper\npublic: yes please\n", 3, "public", "must be true or false"),
        ("name: helper\n", "name: helper\ninteractionTtlSeconds: 0\n", 3, "interactionTtlSeconds", "must be a positive number of seconds"),
        ("name: helper\n", "name: helper\nloop: {connections: maybe}\n", 3, "loop.connections", "must be true or false"),
        ("name: helper\n", "name: helper\nloop: [1]\n", 3, "loop", "must be a mapping"),
        ("  provider: scripted\n", "  provider: 7\n", 18, "model.provider", "must be a string"),
        ("  deploy/deploy_build: approve\n", "  deploy/deploy_build:\n", 16, "policy.deploy/deploy_build", "must be allow, approve or deny"),
        ("  deploy/deploy_build: approve\n", "  deploy/deploy_build: {action: maybe}\n", 16, "policy.deploy/deploy_build.action", "must be one of allow, approve, deny"),
    ],
    ids=[
        "tool-schema-nested-type-12",
        "tool-schema-type-12",
        "tool-schema-required-not-a-list",
        "tool-schema-not-a-mapping",
        "tool-without-server",
        "public-not-a-boolean",
        "ttl-zero",
        "loop-connections-not-a-boolean",
        "loop-not-a-mapping",
        "provider-not-a-string",
        "policy-empty",
        "policy-bad-action-in-mapping",
    ],
)  # fmt: skip
def test_agent_file_errors_from_the_schema_name_file_line_and_field(
    world, tmp_path, old, new, line, field, message
):
    assert old in WITH_TOOL
    path = tmp_path / "broken.md"
    path.write_text(WITH_TOOL.replace(old, new, 1))
    with pytest.raises(CommandError) as caught:
        load_agents(path)
    assert str(caught.value).startswith(f"{path}:{line}: {field}: {message}"), str(caught.value)
    assert not Agent.objects.exists()


def test_a_file_with_a_valid_tool_schema_loads(world, tmp_path):
    (tmp_path / "helper.md").write_text(WITH_TOOL)
    assert "1 created" in load_agents(tmp_path)
    assert Agent.objects.get(slug="helper").tools[0]["schema"]["properties"] == {
        "build": {"type": "string"}
    }


def test_the_first_problem_in_the_file_is_the_one_reported(world, tmp_path):
    path = tmp_path / "two.md"
    path.write_text(WITH_TOOL.replace("name: helper\n", "name: helper\npublic: 1\n").replace(
        "type: object\n", "type: 12\n"
    ))  # fmt: skip
    with pytest.raises(CommandError, match=rf"^{path}:3: public: "):
        load_agents(path)


TWO_SKILLS = GOOD.replace(
    "    description: Helps with anything.\n",
    "    description: Helps with anything.\n"
    "  - id: triage\n    name: Triage\n    description: Sorts requests.\n",
)


def test_default_skill_names_one_of_the_skills(world, tmp_path):
    (tmp_path / "helper.md").write_text(
        TWO_SKILLS.replace("skills:\n", "default_skill: triage\nskills:\n")
    )
    load_agents(tmp_path)
    assert Agent.objects.get(slug="helper").default_skill == "triage"


def test_a_default_skill_that_is_not_a_skill_is_refused_with_its_line(world, tmp_path):
    path = tmp_path / "broken.md"
    path.write_text(TWO_SKILLS.replace("skills:\n", "default_skill: nope\nskills:\n"))
    with pytest.raises(CommandError, match=rf"^{path}:4: default_skill: 'nope' is not one of"):
        load_agents(path)
    assert not Agent.objects.exists()


def test_a_file_without_an_expiry_stores_none_and_reloads_unchanged(world, tmp_path):
    """No interactionTtlSeconds: the agent has none (the tenant's default applies), and
    loading the same file again changes nothing; 86400 given is stored as given."""
    (tmp_path / "helper.md").write_text(GOOD)
    load_agents(tmp_path)
    agent = Agent.objects.get(tenant=world.a.tenant, slug="helper")
    assert agent.interaction_ttl_seconds is None
    assert "0 created, 0 updated, 1 unchanged" in load_agents(tmp_path)
    (tmp_path / "helper.md").write_text(
        GOOD.replace("Helps.", "Helps.\ninteractionTtlSeconds: 86400")
    )
    assert "1 updated" in load_agents(tmp_path)
    agent.refresh_from_db()
    assert agent.interaction_ttl_seconds == 86400
    (tmp_path / "helper.md").write_text(GOOD)
    assert "1 updated" in load_agents(tmp_path)
    agent.refresh_from_db()
    assert agent.interaction_ttl_seconds is None
