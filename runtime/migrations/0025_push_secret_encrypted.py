"""A tenant's push signing secrets are stored Fernet-encrypted (they were the one secret at
rest in clear). The columns are renamed to say so, widened for the ciphertext, and
every secret already there is encrypted under the first CONNECTIONS_ENCRYPTION_KEY (and
decrypted again when migrating back)."""

from django.db import migrations, models

import runtime.kernel.push.push_models

FIELDS = ("secret_encrypted", "previous_secret_encrypted")


def secrets_encrypt(apps, schema_editor):
    from connections.crypto import secret_encrypt

    PushSettings = apps.get_model("runtime", "PushSettings")
    for row in PushSettings.objects.all():
        values = {f: secret_encrypt(getattr(row, f)) for f in FIELDS if getattr(row, f)}
        if values:
            PushSettings.objects.filter(pk=row.pk).update(**values)


def secrets_decrypt(apps, schema_editor):
    from connections.crypto import secret_decrypt

    PushSettings = apps.get_model("runtime", "PushSettings")
    for row in PushSettings.objects.all():
        values = {f: secret_decrypt(getattr(row, f)) for f in FIELDS if getattr(row, f)}
        if values:
            PushSettings.objects.filter(pk=row.pk).update(**values)


class Migration(migrations.Migration):

    dependencies = [
        ("runtime", "0024_push_config_from_seq"),
    ]

    operations = [
        migrations.RenameField("pushsettings", "secret", "secret_encrypted"),
        migrations.RenameField("pushsettings", "previous_secret", "previous_secret_encrypted"),
        migrations.AlterField(
            model_name="pushsettings",
            name="secret_encrypted",
            field=models.TextField(
                default=runtime.kernel.push.push_models.new_webhook_secret_encrypted,
                help_text="Fernet-encrypted",
            ),
        ),
        migrations.AlterField(
            model_name="pushsettings",
            name="previous_secret_encrypted",
            field=models.TextField(blank=True, help_text="Fernet-encrypted"),
        ),
        migrations.RunPython(secrets_encrypt, secrets_decrypt),
    ]
