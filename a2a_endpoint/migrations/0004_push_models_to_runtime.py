"""Push notifications are the core's models from here on (runtime's 0018 takes them, tables
and rows as they are): this drops them from a2a_endpoint's state only."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('a2a_endpoint', '0003_push_config_dialect'),
        ('runtime', '0023_push_models_from_a2a_endpoint'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='pushattempt',
                    name='delivery',
                ),
                migrations.RemoveField(
                    model_name='pushconfig',
                    name='task',
                ),
                migrations.RemoveField(
                    model_name='pushconfig',
                    name='tenant',
                ),
                migrations.RemoveField(
                    model_name='pushdelivery',
                    name='config',
                ),
                migrations.RemoveField(
                    model_name='pushdelivery',
                    name='event',
                ),
                migrations.RemoveField(
                    model_name='pushdelivery',
                    name='tenant',
                ),
                migrations.DeleteModel(
                    name='PushReceiverSlot',
                ),
                migrations.RemoveField(
                    model_name='pushsettings',
                    name='tenant',
                ),
                migrations.DeleteModel(
                    name='PushAttempt',
                ),
                migrations.DeleteModel(
                    name='PushConfig',
                ),
                migrations.DeleteModel(
                    name='PushDelivery',
                ),
                migrations.DeleteModel(
                    name='PushSettings',
                ),
            ],
            database_operations=[],
        ),
    ]
