import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0006_tenant_time_zone"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="expiry_may_approve",
            field=models.BooleanField(
                default=False,
                help_text="A policy rule with risk: low and on_expiry: approve may approve its "
                "calls when nobody decided in time. Off: such calls are denied at expiry, as "
                "every other.",
            ),
        ),
        migrations.AddField(
            model_name="membership",
            name="away_from",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="membership",
            name="away_until",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="membership",
            name="delegate",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="tenants.membership",
            ),
        ),
    ]
