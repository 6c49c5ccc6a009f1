"""Approvals record their held call: ``request["call"]`` holds the server, the tool,
the arguments, and the ``title`` and ``redact`` of the tool's policy entry, so that every
list summarises a page of approvals from the rows it read (runtime.decisions.summaries).

This fills it in for the approvals held before, from their effect (the arguments as they
stand) and the agent's policy now.
"""

from django.db import migrations


def _terms(entry) -> dict:
    # As runtime.agents.title_syntax.call_terms read them when this was written.
    if not isinstance(entry, dict):
        return {}
    terms = {}
    if isinstance(entry.get("title"), str) and entry["title"].strip():
        terms["title"] = entry["title"]
    redact = [n for n in entry.get("redact") or [] if isinstance(n, str) and n]
    if redact:
        terms["redact"] = redact
    return terms


def held_calls_record(apps, schema_editor):
    Interaction = apps.get_model("runtime", "Interaction")
    Effect = apps.get_model("runtime", "Effect")
    rows = Interaction.objects.filter(kind="approval").select_related("agent").order_by("pk")
    batch = []
    for interaction in rows.iterator(chunk_size=500):
        request = interaction.request if isinstance(interaction.request, dict) else {}
        if not isinstance(request.get("call"), dict):
            batch.append(interaction)
        if len(batch) >= 500:
            _record(Interaction, Effect, batch)
            batch = []
    if batch:
        _record(Interaction, Effect, batch)


def _record(Interaction, Effect, batch) -> None:  # noqa: N803 - historical models
    # One read of the batch's effects (an approval's id is its effect's), one write.
    effects = {
        (e.tenant_id, e.task_id, e.public_id): e
        for e in Effect.objects.filter(public_id__in=[i.public_id for i in batch])
    }
    changed = []
    for interaction in batch:
        effect = effects.get((interaction.tenant_id, interaction.task_id, interaction.public_id))
        if effect is None:
            continue
        rules = interaction.agent.tool_policy or {}
        entry = rules.get(f"{effect.server}/{effect.tool}", rules.get(effect.server))
        request = interaction.request if isinstance(interaction.request, dict) else {}
        interaction.request = {
            **request,
            "call": {
                "server": effect.server,
                "tool": effect.tool,
                "arguments": effect.arguments if isinstance(effect.arguments, dict) else {},
                **_terms(entry),
            },
        }
        changed.append(interaction)
    Interaction.objects.bulk_update(changed, ["request"])


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0017_agents_deciders_tool_results"),
    ]

    operations = [
        migrations.RunPython(held_calls_record, migrations.RunPython.noop, elidable=True),
    ]
