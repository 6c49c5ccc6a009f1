import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0011_interaction_agent"),
    ]

    operations = [
        migrations.AlterField(
            model_name="interaction",
            name="agent",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="runtime.agent",
            ),
        ),
        migrations.AddIndex(
            model_name="interaction",
            index=models.Index(
                condition=models.Q(("state", "open")),
                fields=["tenant", "agent", "kind"],
                name="interaction_open_by_agent",
            ),
        ),
    ]
