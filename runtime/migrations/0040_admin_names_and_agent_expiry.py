from django.db import migrations, models

# Before this, 86400 (the default every agent made without an expiry got) read as "not set":
# such agents keep what they did (the tenant's default expiry, else 24 hours) as NULL.
BUILT_IN = 24 * 3600


def unset_the_built_in(apps, schema_editor):
    apps.get_model("runtime", "Agent").objects.filter(interaction_ttl_seconds=BUILT_IN).update(
        interaction_ttl_seconds=None
    )


def set_the_built_in(apps, schema_editor):
    apps.get_model("runtime", "Agent").objects.filter(interaction_ttl_seconds=None).update(
        interaction_ttl_seconds=BUILT_IN
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0038_task_tenant_recent"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="pushconfig",
            options={
                "verbose_name": "push subscription",
                "verbose_name_plural": "push subscriptions",
            },
        ),
        migrations.AlterField(
            model_name="agent",
            name="interaction_ttl_seconds",
            field=models.PositiveIntegerField(
                blank=True,
                default=None,
                help_text="Seconds an approval or question stays open, unless a ladder's "
                "expire step says. Empty: the tenant's default expiry, else 24 hours.",
                null=True,
            ),
        ),
        migrations.RunPython(unset_the_built_in, set_the_built_in),
    ]
