"""The Slack app's settings page (the tenant's admins): the bot token and signing secret, the
interactivity Request URL and the manifest to paste into Slack. Posts need CSRF."""

import json

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from integrations.slack.forms import SlackAppForm
from integrations.slack.models import SlackApp
from integrations.slack.settings import (
    SlackAppError,
    request_url,
    slack_app_delete,
    slack_app_save,
    slack_manifest,
)
from tenants.access import member_required, require_admin


def _page(request, form, *, status=200):
    tenant = request.membership.tenant
    context = {
        "nav": "notifications",
        "form": form,
        "slack_app": SlackApp.objects.filter(tenant=tenant).first(),
        "request_url": request_url(tenant),
        "manifest": json.dumps(slack_manifest(tenant), indent=2),
    }
    return render(request, "integrations/slack/app.html", context, status=status)


@require_http_methods(["GET", "POST"])
@member_required
def slack_app_settings(request):
    require_admin(request.membership)
    if request.method == "GET":
        return _page(request, SlackAppForm())
    form = SlackAppForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    try:
        slack_app_save(
            tenant=request.membership.tenant,
            bot_token=form.cleaned_data["bot_token"],
            signing_secret=form.cleaned_data["signing_secret"],
            app_token=form.cleaned_data["app_token"],
            app_token_remove=form.cleaned_data["app_token_remove"],
        )
    except SlackAppError as exc:
        form.add_error(None, str(exc))
        return _page(request, form, status=400)
    messages.success(request, "Saved the Slack app. Add a channel of kind Slack app to use it.")
    return redirect("slack_app_settings")


@require_POST
@member_required
def slack_app_remove(request):
    require_admin(request.membership)
    slack_app_delete(tenant=request.membership.tenant)
    messages.success(request, "Removed the Slack app; its channels fail until it is set again.")
    return redirect("notifications:settings")
