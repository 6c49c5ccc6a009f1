"""Development's mail: every message sent is kept as a file under ``VAR_DIR/outbox/`` (one
``.eml`` each, as it would have been sent), which ``/dev/outbox/`` lists and shows with its
links clickable (config.outbox_views). Nothing is mailed.

Files rather than a table: the web process (invitations, password resets) and the worker
(notifications) both send, and both see VAR_DIR; a file needs no migration, cannot reach a
production database, and goes with ``make clean``. The console gets one line per message,
naming where to read it, instead of the escaped MIME that Django's console backend prints.
"""

import logging
import re
import secrets
import time
from email import policy
from email.message import EmailMessage
from email.parser import BytesHeaderParser, BytesParser
from pathlib import Path

from django.conf import settings
from django.core.mail.backends.base import BaseEmailBackend

from config.site import site_url

logger = logging.getLogger(__name__)

# The newest messages kept; older ones are removed as new ones come.
OUTBOX_KEEP = 500
# A kept message's name: the time it was sent (nanoseconds, so names sort as they were sent)
# and a random part (two processes sending in the same nanosecond).
MAIL_NAME = re.compile(r"[0-9]{20}-[0-9a-f]{8}")


def outbox_dir() -> Path:
    return Path(settings.VAR_DIR) / "outbox"


class OutboxBackend(BaseEmailBackend):
    """Keep each message in the outbox folder instead of sending it."""

    def send_messages(self, email_messages) -> int:
        if not email_messages:
            return 0
        folder = outbox_dir()
        folder.mkdir(parents=True, exist_ok=True)
        kept = 0
        for message in email_messages:
            if not message.recipients():
                continue
            name = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
            raw = message.message().as_bytes(linesep="\n")
            # Written aside and renamed: the outbox never lists half a message.
            part = folder / f".{name}.part"
            part.write_bytes(raw)
            part.replace(folder / f"{name}.eml")
            kept += 1
            logger.info(
                "e-mail to %s kept, not sent: read it at %s/dev/outbox/%s/",
                ", ".join(message.recipients()),
                site_url(),
                name,
            )
        outbox_trim(folder)
        return kept


def outbox_trim(folder: Path, keep: int = OUTBOX_KEEP) -> None:
    for old in sorted(folder.glob("*.eml"), reverse=True)[keep:]:
        old.unlink(missing_ok=True)


def outbox_names(limit: int = 100) -> list[str]:
    """The kept messages' names, newest first."""
    folder = outbox_dir()
    if not folder.is_dir():
        return []
    names = sorted(p.stem for p in folder.glob("*.eml") if MAIL_NAME.fullmatch(p.stem))
    return names[::-1][:limit]


def outbox_read(name: str, *, headers_only: bool = False) -> EmailMessage | None:
    """A kept message by name (None: no such message, or a name that is none)."""
    if not MAIL_NAME.fullmatch(name):
        return None
    path = outbox_dir() / f"{name}.eml"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    parser = BytesHeaderParser if headers_only else BytesParser
    # policy.default parses into EmailMessage (get_body, get_content).
    return parser(policy=policy.default).parsebytes(raw)
