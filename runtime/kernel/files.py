"""files/v1 (profile v2): what an artifact's files entry says, and the caller's url parts.

An artifact's ``size`` and ``sha256`` are of the bytes a caller gets for it: for a ``raw``
part the decoded bytes (served from a signed download link, a2a_endpoint.files), for a
``text`` part its UTF-8 bytes, for a ``data`` part its canonical JSON (sorted keys, no
spaces, UTF-8). An artifact of several parts hashes their bytes one after another. A ``url``
part the agent points elsewhere is not ours to hash: such an artifact has no size or sha256.

Incoming ``url`` parts are checked at the edge (``url_part_check``: a URL that is not one
canonical http(s) URL of an allowed host is refused before anything is created), then fetched
by the worker at the start of the turn (never by the web request) through
connections.outbound's guard, with a size limit, a timeout, and a media type check; a part
that cannot be fetched fails that part, not the turn: the model sees why (runtime.turn.inputs).
"""

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass

from django.conf import settings

from connections.outbound import OutboundRefused, check_url, fetch_url

# A stored artifact part keeps its file as this reference in ``url``; the wire turns it into
# a signed, expiring download link for the caller (a2a_endpoint.wire).
FILE_REF_PREFIX = "countersign-file:"
# The model sees the text of a fetched text file up to this many characters.
INLINE_TEXT_CHARS = 100_000


def canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def decode_raw(value: str) -> bytes:
    """ProtoJSON bytes: standard or URL-safe base64, padding optional."""
    text = value.strip()
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the raw part is not valid base64") from None


def part_bytes(part: dict) -> bytes | None:
    """The bytes a caller is served for a part, or None for a url part hosted elsewhere."""
    if "raw" in part:
        return decode_raw(part["raw"])
    if "text" in part:
        return str(part["text"]).encode()
    if "data" in part:
        return canonical_json(part["data"])
    return None


def file_ref(part: dict) -> str | None:
    url = part.get("url")
    if isinstance(url, str) and url.startswith(FILE_REF_PREFIX):
        return url[len(FILE_REF_PREFIX) :]
    return None


def digest(blobs: list[bytes]) -> tuple[int, str]:
    hasher = hashlib.sha256()
    for blob in blobs:
        hasher.update(blob)
    return sum(len(b) for b in blobs), hasher.hexdigest()


# --- media types ----------------------------------------------------------------------------


def _bare(media_type: str) -> str:
    return media_type.split(";")[0].strip().lower()


def media_type_supported(media_type: str) -> bool:
    """FILES_FETCH_MEDIA_TYPES entries are exact types or ``major/*``."""
    media_type = _bare(media_type)
    for allowed in settings.FILES_FETCH_MEDIA_TYPES:
        allowed = allowed.strip().lower()
        if allowed == media_type or (
            allowed.endswith("/*") and media_type.startswith(allowed[:-1])
        ):
            return True
    return False


def media_types_match(declared: str, served: str) -> bool:
    """The served Content-Type must be of the declared type's family: the same major type for
    text and images (a declared text/plain may come as text/markdown), the exact type
    otherwise (application/json and application/pdf are not interchangeable)."""
    declared, served = _bare(declared), _bare(served)
    if declared == served:
        return True
    major = declared.split("/")[0]
    return major in ("text", "image") and served.split("/")[0] == major


def is_text(media_type: str) -> bool:
    media_type = _bare(media_type)
    return media_type.startswith("text/") or media_type in ("application/json", "application/xml")


# --- incoming url parts -----------------------------------------------------------------------


@dataclass
class FetchedPart:
    index: int
    url: str
    filename: str
    media_type: str
    content: bytes


@dataclass
class FailedPart:
    index: int
    url: str
    filename: str
    media_type: str
    error: str  # why it could not be fetched, for the model (and the operator) to read

    @classmethod
    def of(cls, spec: dict, error: str) -> "FailedPart":
        return cls(
            index=spec["index"],
            url=spec["url"],
            filename=spec.get("filename", ""),
            media_type=spec.get("mediaType", ""),
            error=error,
        )


def url_part_check(url: str) -> None:
    """Refuse a url part the worker could never fetch, saying why (OutboundRefused): the
    fetcher's own URL, host and address rules, applied with no network I/O."""
    check_url(url, settings.FILES_FETCH_ALLOWED_HOSTS)


def _media_type_check(declared: str):
    def check(served: str) -> None:
        if not served:
            raise OutboundRefused("the server did not say what media type the file is")
        if not media_type_supported(served):
            raise OutboundRefused(f"the media type {served} is not one this server accepts")
        if declared and not media_types_match(declared, served):
            raise OutboundRefused(f"the part declares {declared} but the server sent {served}")

    return check


def fetch_part(spec: dict) -> FetchedPart:
    """Fetch one url part through the outbound guard, or raise OutboundRefused."""
    declared = spec.get("mediaType", "")
    if declared and not media_type_supported(declared):
        raise OutboundRefused(f"the media type {declared} is not one this server accepts")
    body, served = fetch_url(
        spec["url"],
        allowed_hosts=settings.FILES_FETCH_ALLOWED_HOSTS,
        max_bytes=settings.FILES_FETCH_MAX_BYTES,
        timeout=settings.FILES_FETCH_TIMEOUT_SECONDS,
        check_media_type=_media_type_check(declared),
    )
    return FetchedPart(
        index=spec["index"],
        url=spec["url"],
        filename=spec.get("filename", ""),
        media_type=declared or served,
        content=body,
    )


def url_parts(message: dict) -> list[dict]:
    """The url parts of a caller's message, in order, as the worker will fetch them."""
    out = []
    for index, part in enumerate(message.get("parts", [])):
        if "url" in part:
            spec = {"index": index, "url": part["url"]}
            for key in ("filename", "mediaType"):
                if part.get(key):
                    spec[key] = part[key]
            out.append(spec)
    return out
