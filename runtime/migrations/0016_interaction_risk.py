from django.db import migrations, models


class Migration(migrations.Migration):
    """The held call's risk as it opened: a decision takes the stricter
    of it and the tool's risk at decision time. Rows opened before it say normal; their
    tool's risk now is read at decision time as for every approval."""

    dependencies = [
        ("runtime", "0015_agent_default_skill"),
    ]

    operations = [
        migrations.AddField(
            model_name="interaction",
            name="risk",
            field=models.CharField(
                choices=[("normal", "normal"), ("high", "high: approving needs a step-up")],
                default="normal",
                max_length=8,
            ),
        ),
    ]
