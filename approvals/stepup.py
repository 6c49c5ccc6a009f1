"""Step-up for the browser (approving a ``risk: high`` tool): has the member signed in or
re-authenticated recently, by the method their account calls for, and where to send them when
not.

django-allauth (65.x) keeps a record of each authentication of the session (method, time,
``reauthenticated``); a member with TOTP must have passed it (method ``mfa``), others their
password (or TOTP). The decision itself is refused by the core (runtime.decisions.receipts)
unless the view says the decider stepped up.
"""

import copy
import time

from allauth.account.authentication import get_authentication_records
from allauth.mfa.utils import is_mfa_enabled
from django.conf import settings
from django.urls import reverse


def _needs_totp(user) -> bool:
    return is_mfa_enabled(user, types=["totp"])


def stepped_up(request) -> bool:
    """The session's member authenticated within STEP_UP_SECONDS by the method they must use."""
    user = request.user
    if not user.is_authenticated:
        return False
    methods = {"mfa"} if _needs_totp(user) else {"password", "mfa", "code"}
    now = time.time()
    return any(
        record.get("method") in methods
        and now - float(record.get("at", 0)) < settings.STEP_UP_SECONDS
        for record in get_authentication_records(request, user)
    )


def step_up_url(request) -> str:
    """allauth's re-authentication page for this member: TOTP when they have it."""
    if _needs_totp(request.user):
        return reverse("mfa_reauthenticate")
    return reverse("account_reauthenticate")


def step_up_redirect(request, *, resume_at: str | None = None):
    """Send the member to re-authenticate; allauth then replays this POST (the decision) once
    they have, so what they decided (and any edited arguments) is not lost. ``resume_at``:
    the path to replay it at, and the re-authentication page's ``next=``, instead of this
    request's own (a path that carries a credential, an e-mail link's token, stays out of
    URLs and logs)."""
    # allauth's own mechanism of @reauthentication_required: the POST is stashed in the
    # session and replayed by the re-authentication view's success (resume_request), when
    # ``next`` is the stashed request's path.
    from allauth.account.internal.flows.reauthentication import suspend_request

    if resume_at is not None:
        suspended = copy.copy(request)
        suspended.path = suspended.path_info = resume_at
        suspended.META = {**request.META, "PATH_INFO": resume_at, "QUERY_STRING": ""}
        for name in ("RAW_URI", "REQUEST_URI"):
            suspended.META.pop(name, None)
        request = suspended
    return suspend_request(request, step_up_url(request))
