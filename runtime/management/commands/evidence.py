"""`python manage.py evidence export --tenant T --since ... --until ... [--out FILE]` writes a
tenant's evidence pack for a period (runtime.evidence.pack); `evidence verify PACK [--key K]`
checks one offline and names the first thing that does not hold (exit status 1)."""

import re
from datetime import UTC, datetime, time, timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from runtime.evidence.pack import evidence_pack_write
from runtime.evidence.verify import pack_verify
from tenants.management.commands.tokens import tenant_named

_AGO = re.compile(r"^(\d{1,5})([dh])$")


def moment(text: str, *, name: str) -> datetime:
    """A moment as the command takes it: an ISO date (midnight UTC), an ISO date and time
    (UTC when it names no offset), or a span before now (``30d``, ``12h``)."""
    text = (text or "").strip()
    ago = _AGO.match(text)
    if ago:
        unit = {"d": "days", "h": "hours"}[ago[2]]
        return timezone.now() - timedelta(**{unit: int(ago[1])})
    try:
        found = parse_datetime(text)
        if found is None and parse_date(text) is not None:
            found = datetime.combine(parse_date(text), time())  # type: ignore[arg-type]
    except ValueError:
        found = None
    if found is None:
        raise CommandError(f"--{name} {text!r} is not a date: write 2026-11-01, an ISO time or 30d")
    return found if timezone.is_aware(found) else timezone.make_aware(found, UTC)


class Command(BaseCommand):
    help = "Export a tenant's signed evidence pack for a period, or verify one offline."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        export = sub.add_parser("export", help="Write the tenant's evidence pack (a zip).")
        export.add_argument("--tenant", required=True, help="The tenant's slug.")
        export.add_argument("--since", required=True, help="From (2026-11-01, ISO time, 30d).")
        export.add_argument("--until", default="", help="Until, not included (default: now).")
        export.add_argument("--out", default="", help="The file (default: a name in the cwd).")
        verify = sub.add_parser("verify", help="Check a pack offline.")
        verify.add_argument("pack", help="The pack's file.")
        verify.add_argument(
            "--key",
            default=None,
            help="The signing key to pin: the server's JWKS (/.well-known/jwks.json) saved as "
            "a file, or one key's x from it.",
        )

    def handle(self, *args, **options):
        if options["action"] == "verify":
            self._verify(options)
        else:
            self._export(options)

    def _export(self, options) -> None:
        tenant = tenant_named(options["tenant"])
        since = moment(options["since"], name="since")
        until = moment(options["until"], name="until") if options["until"] else timezone.now()
        if until <= since:
            raise CommandError("--until must be after --since.")
        path = options["out"] or f"evidence-{tenant.slug}-{since:%Y%m%d}-{until:%Y%m%d}.zip"
        with open(path, "wb") as out:
            written = evidence_pack_write(tenant=tenant, since=since, until=until, out=out)
        self.stdout.write(
            f"Wrote {path}: {written.receipts} receipts, {written.audit_rows} audit rows, "
            f"{written.policies} policy versions, {written.members} deciders; signed by key "
            f"{written.key_id}."
        )

    def _verify(self, options) -> None:
        check = pack_verify(options["pack"], key=options["key"])
        if not check.holds:
            raise CommandError(f"The pack does not verify: {check.problem}.", returncode=1)
        self.stdout.write(
            f"The pack verifies: {check.receipts} receipts, {check.audit_rows} audit rows, "
            f"{check.policies} policy versions."
        )
