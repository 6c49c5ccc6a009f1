from django.db import migrations, models


def duplicates_drop(apps, schema_editor):
    """On SQLite the old constraint was not created (W047): a tenant could have two ladders
    for the same scope, the one without an agent. The last one saved is kept, as the one its
    admin set last; on PostgreSQL there are none."""
    Ladder = apps.get_model("notifications", "Ladder")
    seen = set()
    for ladder in Ladder.objects.filter(agent__isnull=True).order_by("-created_at", "-pk"):
        key = (ladder.tenant_id, ladder.tool)
        if key in seen:
            ladder.delete()
        seen.add(key)


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0003_follow_ups_slack_app_omit_arguments"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="ladder",
            name="notify_ladder_unique",
        ),
        migrations.RunPython(duplicates_drop, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="ladder",
            constraint=models.UniqueConstraint(
                condition=models.Q(("agent__isnull", False)),
                fields=("tenant", "agent", "tool"),
                name="notify_ladder_unique_agent",
                violation_error_message="This agent has a ladder for this tool already.",
            ),
        ),
        migrations.AddConstraint(
            model_name="ladder",
            constraint=models.UniqueConstraint(
                condition=models.Q(("agent__isnull", True)),
                fields=("tenant", "tool"),
                name="notify_ladder_unique_tenant",
                violation_error_message="The tenant has a ladder for this tool already.",
            ),
        ),
    ]
