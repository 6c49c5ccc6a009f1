"""An agent's tool policy and ladder: one writer for every change, and its history.

The database is the truth once an agent exists; an AGENT.md file is an import. Every path
that sets an agent's policy (Django admin's form, a restore from the history, ``load_agents``
and the demo seed through ``agentfile.agent_upsert``) calls ``policy_set``, which keeps the
version in the agent's history (PolicyVersion) and writes ``policy.changed`` to the audit log
with the old and new versions and a readable diff, in the caller's transaction.
"""

import difflib
import hashlib
import json

import yaml
from django.db import transaction

from runtime.agents.agent_models import Agent, PolicyVersion
from runtime.kernel.audit import audit_record

# A diff kept in the audit is cut at this length (a policy of hundreds of tools): the history
# keeps both versions whole.
DIFF_LIMIT = 20_000


def policy_hash(tool_policy) -> str:
    """The version of a tool policy: the SHA-256 of it as canonical JSON (sorted keys, no
    spaces), the one runtime.decisions.receipts.policy_version names."""
    return hashlib.sha256(
        json.dumps(tool_policy or {}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def policy_document(*, tool_policy, ladder) -> dict:
    """What "the policy" is here: the tool policy and the ladder (AGENT.md's ``policy`` and
    ``ladder``; the admin edits them together)."""
    return {"policy": tool_policy or {}, "ladder": ladder or {}}


def policy_document_hash(document: dict) -> str:
    return policy_hash(document)


def agent_policy_document(agent: Agent) -> dict:
    return policy_document(tool_policy=agent.tool_policy, ladder=agent.ladder)


def policy_text(document: dict) -> str:
    """The policy as AGENT.md's YAML writes it, keys sorted: what a diff compares."""
    return yaml.safe_dump(document, sort_keys=True, allow_unicode=True, default_flow_style=False)


def policy_diff(old: dict | None, new: dict, *, old_label: str, new_label: str) -> str:
    """A unified diff of two policies, line by line of their YAML."""
    before = policy_text(old).splitlines() if old is not None else []
    after = policy_text(new).splitlines()
    lines = difflib.unified_diff(before, after, fromfile=old_label, tofile=new_label, lineterm="")
    text = "\n".join(lines)
    if len(text) > DIFF_LIMIT:
        text = text[:DIFF_LIMIT] + "\n… (cut; the agent's policy history keeps both versions)"
    return text


def policy_origin(agent: Agent) -> PolicyVersion | None:
    """The version the agent's policy is now, as its history has it (None: set before the
    history was kept, or never)."""
    return agent.policy_versions.order_by("-created_at", "-pk").first()


def policy_change_record(
    *,
    agent: Agent,
    previous: dict | None,
    actor: str,
    source: str,
    via: str,
    source_path: str = "",
    source_version: str = "",
) -> PolicyVersion | None:
    """Record the agent's policy (as saved) in its history and audit ``policy.changed`` with
    the old and new versions and a diff, when it differs from ``previous``; None when it is
    the same. ``previous`` None: a new agent, whose first version is recorded (where its
    policy came from) and not audited as a change (its creation is). Call it in the
    transaction that saved the agent."""
    new = agent_policy_document(agent)
    if previous is not None and previous == new:
        return None
    if previous is None:
        # The agent's creation already kept its first version (agent_created_received, for
        # agents made by any path): say here where it came from.
        first = agent.policy_versions.order_by("created_at", "pk").first()
        if first is not None:
            first.source, first.source_path = source, source_path
            first.source_version, first.set_by = source_version, actor
            first.save(update_fields=["source", "source_path", "source_version", "set_by"])
            return first
    record = PolicyVersion.objects.create(
        tenant_id=agent.tenant_id,
        agent=agent,
        tool_policy=new["policy"],
        ladder=new["ladder"],
        version=policy_hash(new["policy"]),
        source=source,
        source_path=source_path,
        source_version=source_version,
        set_by=actor,
    )
    if previous is None:
        return record
    audit_record(
        tenant_id=agent.tenant_id,
        actor=actor,
        action="policy.changed",
        via=via,
        detail={
            "agent": agent.slug,
            "version": record.version,
            "previous_version": policy_hash(previous["policy"]),
            "source": source,
            "where": record.where,
            "diff": policy_diff(previous, new, old_label="before", new_label="after"),
        },
    )
    return record


def policy_set(
    *,
    agent: Agent,
    tool_policy,
    ladder,
    actor: str,
    source: str,
    via: str,
    source_version: str = "",
) -> PolicyVersion | None:
    """Set an existing agent's tool policy and ladder; record and audit it as
    policy_change_record does (None when it was the policy already)."""
    previous = agent_policy_document(agent)
    new = policy_document(tool_policy=tool_policy, ladder=ladder)
    if previous == new:
        return None
    with transaction.atomic():
        agent.tool_policy, agent.ladder = new["policy"], new["ladder"]
        agent.save(update_fields=["tool_policy", "ladder", "updated_at"])
        return policy_change_record(
            agent=agent,
            previous=previous,
            actor=actor,
            source=source,
            via=via,
            source_version=source_version,
        )


def policy_restore(*, agent: Agent, version: PolicyVersion, actor: str) -> PolicyVersion | None:
    """Make an earlier version of the agent's policy its policy again (audited as a change;
    None when it is the policy already)."""
    if version.agent_id != agent.pk:
        raise ValueError("That version is of another agent.")
    return policy_set(
        agent=agent,
        tool_policy=version.tool_policy,
        ladder=version.ladder,
        actor=actor,
        source=PolicyVersion.Source.RESTORE,
        via="admin",
        source_version=version.version,
    )


def agent_created_received(sender, *, instance, created=False, raw=False, **kwargs) -> None:
    """An agent made by any path (a file, admin, the shell, a test's ORM call): its policy
    kept as its first version, in the transaction of the save, so that an evidence pack
    knows the policy in force from the agent's first moment."""
    if not created or raw:
        return
    document = agent_policy_document(instance)
    PolicyVersion.objects.create(
        tenant_id=instance.tenant_id,
        agent=instance,
        tool_policy=document["policy"],
        ladder=document["ladder"],
        version=policy_hash(document["policy"]),
        source=PolicyVersion.Source.FILE if instance.source_path else PolicyVersion.Source.ADMIN,
        source_path=instance.source_path,
        set_by="created",
    )
