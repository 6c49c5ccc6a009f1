"""The tasks page's index: a tenant's tasks, latest status change first."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0037_call_summary"),
        ("tenants", "0009_members_and_tenant_settings"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="task",
            index=models.Index(
                fields=["tenant", "-status_timestamp", "-id"], name="task_tenant_recent"
            ),
        ),
    ]
