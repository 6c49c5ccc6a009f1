"""`python manage.py countersign_info`: `make run`'s banner again, with fresh tokens.

It runs seed_demo (idempotent: the demo logins are reset to the documented password and
new partner and operator tokens are minted; earlier tokens keep working), because a token's
plaintext is never stored and so cannot be shown twice.
"""

import json
import os
from io import StringIO

from django.core.management import call_command
from django.core.management.base import BaseCommand

from config.banner import banner, base_url, exports


class Command(BaseCommand):
    help = "Print make run's banner (URL, logins, fresh tokens, commands for each demo agent)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--exports",
            action="store_true",
            help='Print only the export lines, for eval "$(... countersign_info --exports)".',
        )
        parser.add_argument(
            "--base-url",
            default="",
            help="The server's address (default: from HOST and PORT, else http://127.0.0.1:8000).",
        )

    def handle(self, *args, **options):
        out = StringIO()
        call_command("seed_demo", "--json", stdout=out)
        demo = json.loads(out.getvalue().strip().splitlines()[-1])
        base = options["base_url"].rstrip("/") or base_url(os.environ)
        self.stdout.write(exports(demo, base) if options["exports"] else banner(demo, base))
