"""files/v1 downloads: signed, expiring links to the file content of a caller's artifacts.

A link is ``/a2a/<tenant>/<agent>/files/<token>``; the token is signed with the server's
SECRET_KEY (django.core.signing, with a timestamp) and names the file, the task and the
subject the task belongs to, so a link is the caller's own: it reaches only that task's
file, and only while the task still belongs to that subject. A link is good for
FILES_URL_TTL_SECONDS; GetTask hands out fresh ones. Expired links get 410, altered ones 403.
"""

import base64
import functools
import re
from collections.abc import Callable

from django.conf import settings
from django.core import signing
from django.http import HttpResponse, JsonResponse
from django.urls import get_script_prefix, reverse
from django.views.decorators.http import require_GET

from runtime.kernel.task_selectors import task_file_for_caller
from tenants.models import Tenant

SALT = "countersign.a2a.files/v1"


def file_token(*, task, file_id: str) -> str:
    return signing.dumps({"f": file_id, "t": task.public_id, "s": task.subject}, salt=SALT)


def files_base(base_url: str, tenant_slug: str, agent_slug: str) -> str:
    """The absolute (or, with no base URL, root-relative) prefix of an agent's file links."""
    return _files_base(base_url, tenant_slug, agent_slug, get_script_prefix())


# Cached: computed for every A2A request (a2a_endpoint.identity.Caller), and it depends on
# nothing but its arguments, the script prefix and the URLconf.
@functools.lru_cache(maxsize=4096)
def _files_base(base_url: str, tenant_slug: str, agent_slug: str, _script_prefix: str) -> str:
    endpoint = reverse("a2a:endpoint", kwargs={"tenant": tenant_slug, "agent": agent_slug})
    return f"{base_url.rstrip('/')}{endpoint}/files/"


def linker(task, base: str | Callable[[], str]) -> Callable[[str], str]:
    """A function from a stored file id of ``task`` to the caller's download link for it;
    ``base`` is files_base(), or a function that computes it when a link is first needed."""

    def link(file_id: str) -> str:
        prefix = base() if callable(base) else base
        return prefix + file_token(task=task, file_id=file_id)

    return link


def _refused(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


@require_GET
def download(request, tenant: str, agent: str, token: str):
    try:
        claims = signing.loads(token, salt=SALT, max_age=settings.FILES_URL_TTL_SECONDS)
    except signing.SignatureExpired:
        return _refused(
            410,
            "This download link has expired; fetch the task again (GetTask) for a fresh link.",
        )
    except signing.BadSignature:
        return _refused(403, "This download link is not valid: it was altered or not issued here.")
    if not isinstance(claims, dict) or not all(isinstance(claims.get(k), str) for k in "fts"):
        return _refused(403, "This download link is not valid: it was altered or not issued here.")
    found_tenant = Tenant.objects.filter(slug=tenant, active=True).first()
    stored = None
    if found_tenant is not None:
        stored = task_file_for_caller(
            tenant=found_tenant,
            agent_slug=agent,
            task_id=claims["t"],
            subject=claims["s"],
            file_id=claims["f"],
        )
    if stored is None:
        return _refused(404, "No such file.")
    response = HttpResponse(
        bytes(stored.content), content_type=stored.media_type or "application/octet-stream"
    )
    # Only safe ASCII in a header: a name with quotes or line breaks must not break it.
    filename = re.sub(r"[^A-Za-z0-9._ -]", "_", stored.filename or stored.artifact_id or "file")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "private, no-store"
    # RFC 9530: the caller can check the bytes against files/v1's sha256 without trusting us.
    digest = base64.b64encode(bytes.fromhex(stored.sha256)).decode()
    response["Repr-Digest"] = f"sha-256=:{digest}:"
    return response
