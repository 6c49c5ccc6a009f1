from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0010_tenant_defaults_and_retention"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="ai_summaries",
            field=models.BooleanField(
                default=False,
                help_text="A model writes a short summary of each held call (its arguments "
                "without redacted fields, and the conversation before it), shown labelled "
                "beside the arguments and checked against them. Off: nothing is sent to a "
                "model for it.",
                verbose_name="AI summaries of held calls",
            ),
        ),
    ]
