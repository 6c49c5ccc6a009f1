"""Approval groups: the held calls of one model reply open together, each
its own interaction of one group.

Interaction.group_id, group_position and listed; a task may have one open interaction per
position (a group's calls are open together, a task without a group waits on one thing, as
before); the inbox's open counts per agent read the listed rows only (one per group), from
the index alone as before (interaction_listed_by_agent replaces interaction_open_by_agent);
a group's calls are found by its id (interaction_group). Existing rows are interactions on
their own: no group, listed.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0025_push_secret_encrypted"),
        ("tenants", "0006_tenant_time_zone"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="interaction",
            name="interaction_one_open_per_task",
        ),
        migrations.RemoveIndex(
            model_name="interaction",
            name="interaction_open_by_agent",
        ),
        migrations.AddField(
            model_name="interaction",
            name="group_id",
            field=models.CharField(blank=True, default="", max_length=40),
        ),
        migrations.AddField(
            model_name="interaction",
            name="group_position",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="interaction",
            name="listed",
            field=models.BooleanField(default=True),
        ),
        migrations.AddIndex(
            model_name="interaction",
            index=models.Index(
                condition=models.Q(("listed", True), ("state", "open")),
                fields=["tenant", "agent", "kind"],
                name="interaction_listed_by_agent",
            ),
        ),
        migrations.AddIndex(
            model_name="interaction",
            index=models.Index(
                condition=models.Q(("group_id", ""), _negated=True),
                fields=["tenant", "group_id"],
                name="interaction_group",
            ),
        ),
        migrations.AddConstraint(
            model_name="interaction",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state", "open")),
                fields=("task", "group_position"),
                name="interaction_one_open_per_task",
            ),
        ),
    ]
