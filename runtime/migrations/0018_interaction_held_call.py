"""Approvals record their held call (issue 25): ``request["call"]`` holds the server, the tool,
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
    rows = Interaction.objects.filter(kind="approval").select_related("agent")
    for interaction in rows.iterator(chunk_size=500):
        request = interaction.request if isinstance(interaction.request, dict) else {}
        if isinstance(request.get("call"), dict):
            continue
        effect = Effect.objects.filter(
            tenant_id=interaction.tenant_id,
            task_id=interaction.task_id,
            public_id=interaction.public_id,
        ).first()
        if effect is None:
            continue
        rules = interaction.agent.tool_policy or {}
        entry = rules.get(f"{effect.server}/{effect.tool}", rules.get(effect.server))
        request["call"] = {
            "server": effect.server,
            "tool": effect.tool,
            "arguments": effect.arguments if isinstance(effect.arguments, dict) else {},
            **_terms(entry),
        }
        Interaction.objects.filter(pk=interaction.pk).update(request=request)


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0017_agents_deciders_tool_results"),
    ]

    operations = [
        migrations.RunPython(held_calls_record, migrations.RunPython.noop, elidable=True),
    ]
