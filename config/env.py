"""Small helpers that read deployment knobs from the environment.

Every secret also accepts ``NAME_FILE`` (a path whose content is the value), so
that container secrets never have to sit in the environment itself.
"""

import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
_DOTENV_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")


def dotenv_load(path: Path | str | None = None) -> Path | None:
    """Set the variables of a ``.env`` file that the environment does not set already.

    The file is ``.env`` beside manage.py, or the one ``ENV_FILE`` names (``ENV_FILE=``, empty,
    reads none). Lines are ``NAME=value`` (``export`` allowed, ``#`` comments, values may be
    quoted); a real environment variable always wins. Returns the file read, if any.
    """
    named = os.environ.get("ENV_FILE")
    if path is None:
        if named == "":
            return None
        path = named or BASE_DIR / ".env"
    path = Path(path)
    if not path.is_file():
        if named:
            raise ImproperlyConfigured(f"ENV_FILE points at {str(path)!r}, which is not a file.")
        return None
    values = {}  # all read before any is set: a bad line sets nothing
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _DOTENV_LINE.match(line)
        if match is None:
            raise ImproperlyConfigured(f"{path}:{number}: not a NAME=value line.")
        name, value = match.group(1), match.group(2).strip()
        try:
            values[name] = _dotenv_value(value)
        except ValueError as exc:
            raise ImproperlyConfigured(f"{path}:{number}: {exc}") from None
    for name, value in values.items():
        os.environ.setdefault(name, value)
    return path


def _dotenv_value(text: str) -> str:
    """A value as written after ``NAME=``: quoted ('...' as it is; "..." with \\" and \\\\)
    and then nothing but an optional ``# comment``, or unquoted up to a `` #`` comment."""
    if not text or text[0] not in "'\"":
        return re.split(r"\s+#", text, maxsplit=1)[0].rstrip()
    quote, out, i = text[0], [], 1
    while i < len(text):
        char = text[i]
        if quote == '"' and char == "\\" and i + 1 < len(text) and text[i + 1] in '"\\':
            out.append(text[i + 1])
            i += 2
            continue
        if char == quote:
            rest = text[i + 1 :].strip()
            if rest and not rest.startswith("#"):
                raise ValueError(f"text after the closing quote: {rest!r}")
            return "".join(out)
        out.append(char)
        i += 1
    raise ValueError(f"the value's {quote} quote is not closed")


def listen_url(host: str, port: str) -> str:
    """The address of a server bound to ``host`` and ``port``, as a browser on the same
    machine reaches it: a server bound to every interface (0.0.0.0, ::) is reached at
    127.0.0.1, the host the `make run` banner prints, so that a link and the banner's login
    share one host and so one session cookie."""
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::", "[::]") else host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address in a URL
    return f"http://{host}:{port or '8000'}"


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), not {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_secret(name: str, default: str = "") -> str:
    """Read NAME, or the content of the file named by NAME_FILE; fail loudly on a bad file."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(
                f"{name}_FILE points at {path!r}, which cannot be read: {exc}"
            ) from exc
    return os.environ.get(name, default)
