"""The tenant's Slack interactivity endpoint (``/integrations/slack/<tenant>/interactions``):
the clicks and modal submissions of the tenant's Slack app, sent by Slack over HTTP (Socket
Mode brings the same payloads over a connection instead: integrations.slack.socket_mode).

Slack signs each request with the app's signing secret: a request whose signature or
timestamp (a 5-minute window) does not verify (``slack_sdk.signature.SignatureVerifier``,
constant-time) is refused and decides nothing. What the payload does is
integrations.slack.interactivity's, whichever way it came.
"""

from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from slack_sdk.signature import SignatureVerifier

from connections.crypto import InvalidToken, secret_decrypt
from integrations.slack.interactivity import SlackUnqueued, payload_parse, slack_payload_take
from integrations.slack.models import SlackApp


def signature_ok(app: SlackApp, request) -> bool:
    timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    if not timestamp.isdigit() or len(timestamp) > 12 or not signature:
        return False
    try:
        secret = secret_decrypt(app.signing_secret_encrypted)
        return SignatureVerifier(secret).is_valid(
            body=request.body, timestamp=timestamp, signature=signature
        )
    except (InvalidToken, ValueError):  # an unreadable secret; a body that is not UTF-8
        return False


@csrf_exempt
@require_POST
def slack_interactions(request, tenant_slug: str):
    app = (
        SlackApp.objects.select_related("tenant")
        .filter(tenant__slug=tenant_slug, tenant__active=True)
        .first()
    )
    if app is None:
        return HttpResponse("No Slack app here.\n", status=404, content_type="text/plain")
    if not signature_ok(app, request):
        return HttpResponse(
            "The request's Slack signature does not verify.\n",
            status=401,
            content_type="text/plain",
        )
    try:
        answer = slack_payload_take(app, payload_parse(request.POST.get("payload")))
    except SlackUnqueued:
        return HttpResponse("Try again in a moment.\n", status=503, content_type="text/plain")
    return JsonResponse(answer) if answer else HttpResponse(status=200)
