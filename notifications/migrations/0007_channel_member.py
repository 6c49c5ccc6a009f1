import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0006_delivery_plural"),
        ("tenants", "0009_members_and_tenant_settings"),
    ]

    operations = [
        migrations.AddField(
            model_name="channel",
            name="member",
            field=models.ForeignKey(
                blank=True,
                help_text="Whose own channel this is (empty: the team's). While they are away "
                "their delegate's own channel is told instead.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="tenants.membership",
            ),
        ),
    ]
