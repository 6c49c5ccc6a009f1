"""`python manage.py rotate_secrets`: re-encrypt every stored secret under the first key.

To rotate CONNECTIONS_ENCRYPTION_KEY: put the new key first (``new,old``), restart, run this
command, check with ``--check`` that nothing needs the old key, then drop it. Apps name their
encrypted fields on their AppConfig (``encrypted_fields = {"Model": ("field", ...)}``), so
this command, low in the layers, imports none of the apps above it.

``--signing-key`` rotates the key that signs receipts instead: a new key signs from now on and
the old one stays published in /.well-known/jwks.json, so the receipts it signed still verify.
The app that signs names the service on its AppConfig (``signing_key_rotate``).
"""

from collections import Counter

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from connections.crypto import InvalidToken, encryption_keys, secret_key_position, secret_rotate


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
        parser.add_argument(
            "--signing-key",
            action="store_true",
            help="Start signing receipts with a new key; the old one stays published.",
        )

    def handle(self, *args, **options):
        if options["signing_key"]:
            return self.signing_key_rotate()
        if options["check"]:
            return self.check_only()
        unreadable = []
        for model, field in encrypted_fields():
            label = f"{model._meta.label}.{field}"
            rows = model.objects.exclude(**{field: ""}).values_list("pk", field)
            rotated = 0
            for pk, ciphertext in rows.iterator(chunk_size=500):
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
            self.stdout.write(f"{label}: {rotated} re-encrypted")
        if unreadable:
            raise CommandError(
                f"{len(unreadable)} secret(s) open with none of the configured keys "
                f"(left as they were): {', '.join(unreadable)}"
            )

    def signing_key_rotate(self) -> None:
        for config in apps.get_app_configs():
            rotate = getattr(config, "signing_key_rotate", None)
            if rotate is not None:
                kid = rotate()
                self.stdout.write(
                    f"Receipts are signed with key {kid} from now on; the keys before it "
                    "stay published in /.well-known/jwks.json."
                )

    def check_only(self) -> None:
        """Change nothing; say which keys the stored secrets still need, by their place in
        CONNECTIONS_ENCRYPTION_KEY (which key is older is the operator's to know)."""
        keys = len(encryption_keys())
        by_key: Counter = Counter()
        unreadable = []
        for model, field in encrypted_fields():
            label = f"{model._meta.label}.{field}"
            rows = model.objects.exclude(**{field: ""}).values_list("pk", field)
            for pk, ciphertext in rows.iterator(chunk_size=500):
                position = secret_key_position(ciphertext)
                if position is None:
                    unreadable.append(f"{label} pk={pk}")
                elif position:
                    by_key[position] += 1
        problems = []
        if by_key:
            which = ", ".join(
                f"{count} with key {position + 1} of {keys}"
                for position, count in sorted(by_key.items())
            )
            problems.append(
                f"{by_key.total()} secret(s) still need a key other than the first of "
                f"CONNECTIONS_ENCRYPTION_KEY ({which}); run rotate_secrets first"
            )
        if unreadable:
            problems.append(
                f"{len(unreadable)} secret(s) open with none of the configured keys: "
                f"{', '.join(unreadable)}"
            )
        if problems:
            raise CommandError("; ".join(problems) + ".")
        self.stdout.write("Every stored secret opens with the first key alone.")
