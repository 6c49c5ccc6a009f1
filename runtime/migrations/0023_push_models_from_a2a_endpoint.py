"""Push notifications move from the a2a_endpoint app into the core: the models are
the runtime app's from here on, and their tables keep their names (``db_table``), so nothing
in the database changes and no row moves (the state only; a2a_endpoint's 0004 drops them
from its state). Their content types follow them, so that permissions given on them stay."""

import django.db.models.deletion
import django.utils.timezone
import runtime.kernel.push.push_models
from django.db import migrations, models


MODELS = ["pushconfig", "pushdelivery", "pushattempt", "pushreceiverslot", "pushsettings"]


def content_types_move(apps, schema_editor, source="a2a_endpoint", target="runtime"):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MODELS:
        if not ContentType.objects.filter(app_label=target, model=model).exists():
            ContentType.objects.filter(app_label=source, model=model).update(app_label=target)


def content_types_back(apps, schema_editor):
    content_types_move(apps, schema_editor, source="runtime", target="a2a_endpoint")


class Migration(migrations.Migration):

    dependencies = [
        ('runtime', '0022_receipt_arguments'),
        ('tenants', '0005_admin_lifecycle'),
        ('contenttypes', '0002_remove_content_type_name'),
        # The tables as a2a_endpoint made them.
        ('a2a_endpoint', '0003_push_config_dialect'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='PushConfig',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('subject', models.CharField(max_length=200)),
                        ('public_id', models.CharField(max_length=200)),
                        ('url', models.URLField(max_length=2000)),
                        ('receiver', models.CharField(help_text='host:port; concurrency is per receiver', max_length=300)),
                        ('token', models.TextField(blank=True, help_text='Fernet-encrypted')),
                        ('auth_scheme', models.CharField(blank=True, max_length=100)),
                        ('auth_credentials', models.TextField(blank=True, help_text='Fernet-encrypted')),
                        ('activated', models.JSONField(blank=True, default=list)),
                        ('dialect', models.CharField(default='1.0', max_length=8)),
                        ('disabled_at', models.DateTimeField(blank=True, null=True)),
                        ('disabled_reason', models.CharField(blank=True, max_length=300)),
                        ('lease_owner', models.CharField(blank=True, max_length=100)),
                        ('lease_until', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('task', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='push_configs', to='runtime.task')),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
                    ],
                    options={
                        'db_table': 'a2a_endpoint_pushconfig',
                    },
                ),
                migrations.CreateModel(
                    name='PushDelivery',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('seq', models.PositiveIntegerField()),
                        ('webhook_id', models.CharField(max_length=64, unique=True)),
                        ('state', models.CharField(choices=[('pending', 'pending'), ('delivered', 'delivered'), ('gave_up', 'gave up'), ('canceled', 'canceled (config disabled or deleted)')], default='pending', max_length=16)),
                        ('attempts', models.PositiveIntegerField(default=0)),
                        ('next_attempt_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('first_attempt_at', models.DateTimeField(blank=True, null=True)),
                        ('last_error', models.CharField(blank=True, max_length=500)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('config', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='deliveries', to='runtime.pushconfig')),
                        ('event', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='runtime.taskevent')),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant')),
                    ],
                    options={
                        'verbose_name_plural': 'push deliveries',
                        'db_table': 'a2a_endpoint_pushdelivery',
                        'ordering': ['config', 'seq'],
                    },
                ),
                migrations.CreateModel(
                    name='PushAttempt',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('status_code', models.PositiveSmallIntegerField(blank=True, null=True)),
                        ('error', models.CharField(blank=True, max_length=500)),
                        ('duration_ms', models.PositiveIntegerField(default=0)),
                        ('at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('delivery', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tries', to='runtime.pushdelivery')),
                    ],
                    options={
                        'db_table': 'a2a_endpoint_pushattempt',
                        'ordering': ['delivery', 'at', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='PushReceiverSlot',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('receiver', models.CharField(max_length=300)),
                        ('slot', models.PositiveSmallIntegerField()),
                        ('holder', models.CharField(blank=True, max_length=100)),
                        ('until', models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        'db_table': 'a2a_endpoint_pushreceiverslot',
                        'constraints': [models.UniqueConstraint(fields=('receiver', 'slot'), name='pushslot_unique')],
                    },
                ),
                migrations.CreateModel(
                    name='PushSettings',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('secret', models.CharField(default=runtime.kernel.push.push_models.new_webhook_secret, max_length=100)),
                        ('previous_secret', models.CharField(blank=True, max_length=100)),
                        ('previous_valid_until', models.DateTimeField(blank=True, null=True)),
                        ('allowed_hosts', models.TextField(blank=True, help_text='Receiver hosts push may be sent to, one per line: example.com, *.example.com, or * for any public host. Empty: none.')),
                        ('rotated_at', models.DateTimeField(blank=True, null=True)),
                        ('tenant', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='push_settings', to='tenants.tenant')),
                    ],
                    options={
                        'verbose_name_plural': 'push settings',
                        'db_table': 'a2a_endpoint_pushsettings',
                    },
                ),
                migrations.AddConstraint(
                    model_name='pushconfig',
                    constraint=models.UniqueConstraint(fields=('task', 'public_id'), name='pushconfig_id_per_task'),
                ),
                migrations.AddIndex(
                    model_name='pushdelivery',
                    index=models.Index(fields=['config', 'state', 'seq'], name='pushdelivery_next'),
                ),
                migrations.AddIndex(
                    model_name='pushdelivery',
                    index=models.Index(fields=['state', 'next_attempt_at'], name='pushdelivery_sweep'),
                ),
                migrations.AddConstraint(
                    model_name='pushdelivery',
                    constraint=models.UniqueConstraint(fields=('config', 'event'), name='pushdelivery_once'),
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_types_move, content_types_back),
    ]
