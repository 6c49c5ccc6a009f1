"""A push config names the task's first event it is given (``from_seq``), so that an event
with no delivery for it can be found and queued (no event is lost to a receiver). A config already
there gets the first event it has a delivery for, else the task's next event."""

from django.db import migrations, models
from django.db.models import Min


def from_seq_set(apps, schema_editor):
    PushConfig = apps.get_model("runtime", "PushConfig")
    for config in PushConfig.objects.select_related("task").annotate(first=Min("deliveries__seq")):
        from_seq = config.first if config.first is not None else config.task.event_seq + 1
        PushConfig.objects.filter(pk=config.pk).update(from_seq=from_seq)


class Migration(migrations.Migration):

    dependencies = [
        ("runtime", "0023_push_models_from_a2a_endpoint"),
    ]

    operations = [
        migrations.AddField(
            model_name="pushconfig",
            name="from_seq",
            field=models.PositiveIntegerField(default=1),
        ),
        migrations.RunPython(from_seq_set, migrations.RunPython.noop),
    ]
