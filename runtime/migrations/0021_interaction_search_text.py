"""Interaction.search_text: what the inbox's search looks in, and
Interaction.summary: a held call's one-line summary, redacted, as a list shows it; both
filled in for the interactions there are, and on PostgreSQL a trigram index over it (pg_trgm, a trusted
extension since PostgreSQL 13: a database owner may create it), so that ``LIKE '%term%'``
reads the index instead of every row. Other databases search the column with a plain LIKE.

Both are written by runtime.decisions.search and runtime.decisions.summaries, which take
plain values: the rows here are read as they are at this migration and handed to them.
"""

from django.db import migrations, models

INDEX = "interaction_search_trgm"
TABLE = "runtime_interaction"


def search_texts_fill(apps, schema_editor):
    from runtime.decisions.search import search_text
    from runtime.decisions.summaries import held_call_summary

    Interaction = apps.get_model("runtime", "Interaction")
    rows = Interaction.objects.select_related("task", "agent").order_by("pk")
    batch = []
    for row in rows.iterator(chunk_size=2000):
        row.search_text = search_text(
            public_id=row.public_id,
            kind=row.kind,
            prompt=row.prompt,
            subject=row.subject,
            task_public_id=row.task.public_id,
            agent_slug=row.agent.slug,
            agent_name=row.agent.name,
            detail=row.detail if isinstance(row.detail, dict) else {},
            request=row.request if isinstance(row.request, dict) else {},
        )
        row.summary = held_call_summary(row)
        batch.append(row)
        if len(batch) >= 2000:
            Interaction.objects.bulk_update(batch, ["search_text", "summary"])
            batch = []
    if batch:
        Interaction.objects.bulk_update(batch, ["search_text", "summary"])


def search_index_create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {INDEX} ON {TABLE} USING gin (search_text gin_trgm_ops)"
    )


def search_index_drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0020_policy_rules_annotations"),
    ]

    operations = [
        migrations.AddField(
            model_name="interaction",
            name="search_text",
            field=models.TextField(blank=True, default="", editable=False),
        ),
        migrations.AddField(
            model_name="interaction",
            name="summary",
            field=models.CharField(blank=True, default="", editable=False, max_length=250),
        ),
        migrations.RunPython(search_texts_fill, migrations.RunPython.noop, elidable=True),
        migrations.RunPython(search_index_create, search_index_drop, elidable=False),
    ]
