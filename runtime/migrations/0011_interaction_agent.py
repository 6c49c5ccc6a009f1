"""Interaction.agent: the task's agent, copied onto each interaction (filled in here).

Nullable in this migration and made required in the next, each in its own transaction:
PostgreSQL refuses to alter a table that still has the backfill's deferred foreign-key
checks pending in the same transaction.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0010_merge_ladder_trust"),
    ]

    operations = [
        migrations.AddField(
            model_name="interaction",
            name="agent",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="runtime.agent",
            ),
        ),
        migrations.RunSQL(
            "UPDATE runtime_interaction SET agent_id = "
            "(SELECT agent_id FROM runtime_task WHERE runtime_task.id = runtime_interaction.task_id)",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
