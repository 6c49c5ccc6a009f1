"""`python manage.py rotate_secrets`: re-encrypt every stored secret under the first key.

To rotate CONNECTIONS_ENCRYPTION_KEY: put the new key first (``new,old``), restart, run this
command, check with ``--check`` that nothing needs the old key, then drop it. Apps name their
encrypted fields on their AppConfig (``encrypted_fields = {"Model": ("field", ...)}``), so
this command, low in the layers, imports none of the apps above it.
"""

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from connections.crypto import InvalidToken, secret_is_current, secret_rotate


def encrypted_fields():
    """(model, field) for every field that holds secret_encrypt() output."""
    for config in apps.get_app_configs():
        for model_name, fields in getattr(config, "encrypted_fields", {}).items():
            model = config.get_model(model_name)
            for field in fields:
                yield model, field


class Command(BaseCommand):
    help = "Re-encrypt every stored secret under the first CONNECTIONS_ENCRYPTION_KEY."

    def add_arguments(self, parser):
        parser.add_argument(
            "--check",
            action="store_true",
            help="Change nothing; fail if any secret still needs a key other than the first.",
        )

    def handle(self, *args, **options):
        stale, unreadable = 0, []
        for model, field in encrypted_fields():
            label = f"{model._meta.label}.{field}"
            rows = model.objects.exclude(**{field: ""}).values_list("pk", field)
            rotated = 0
            for pk, ciphertext in rows.iterator(chunk_size=500):
                if options["check"]:
                    if not secret_is_current(ciphertext):
                        stale += 1
                    continue
                try:
                    fresh = secret_rotate(ciphertext)
                except InvalidToken:
                    unreadable.append(f"{label} pk={pk}")
                    continue
                # Only if unchanged since it was read: a secret replaced meanwhile is already
                # encrypted under the first key and must not be overwritten with the old one.
                rotated += model.objects.filter(pk=pk, **{field: ciphertext}).update(
                    **{field: fresh}
                )
            if not options["check"]:
                self.stdout.write(f"{label}: {rotated} re-encrypted")
        if options["check"]:
            if stale:
                raise CommandError(
                    f"{stale} secret(s) still need an older key; run rotate_secrets first."
                )
            self.stdout.write("Every stored secret opens with the first key alone.")
        elif unreadable:
            raise CommandError(
                f"{len(unreadable)} secret(s) open with none of the configured keys "
                f"(left as they were): {', '.join(unreadable)}"
            )
