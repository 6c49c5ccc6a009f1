"""The notification settings: channels (the tenant's admins) and each member's own choices.

Every read names the tenant of the person's current membership; another tenant's channel id
answers 404 like a missing one. Changing channels takes the admin role; posts need CSRF.
"""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from notifications.channel_settings import (
    ChannelError,
    channel_delete,
    channel_save,
    channel_secret_rotate,
)
from notifications.forms import ChannelForm, PreferenceForm
from notifications.models import Channel
from notifications.selectors import (
    channel_for_tenant,
    channels_for_tenant,
    preference_for,
    recent_tests,
)
from notifications.services import channel_test, preference_set
from notifications.transports import transport_for, transports
from tenants.access import member_required, require_admin
from tenants.models import Membership


def _channel_or_404(request, public_id: str) -> Channel:
    channel = channel_for_tenant(tenant=request.membership.tenant, public_id=public_id)
    if channel is None:
        raise Http404("No such channel.")
    return channel


def _preference_form(request, data=None) -> PreferenceForm:
    preference = preference_for(membership=request.membership)
    initial = {
        "email_enabled": preference.email_enabled if preference else True,
        "digest_minutes": preference.digest_minutes if preference else 0,
    }
    return PreferenceForm(data, initial=initial)


def _settings(request, *, preference_form=None, status=200):
    tenant = request.membership.tenant
    is_admin = request.membership.role == Membership.Role.ADMIN
    # Each medium's own section (the Slack app's set-up), in the order of the kinds.
    sections = [t.settings_section(request=request, is_admin=is_admin) for t in transports()]
    context = {
        "nav": "notifications",
        "channels": channels_for_tenant(tenant=tenant),
        "is_admin": is_admin,
        "tests": recent_tests(tenant=tenant),
        "preference_form": preference_form or _preference_form(request),
        "medium_sections": [section for section in sections if section],
    }
    return render(request, "notifications/settings.html", context, status=status)


@require_http_methods(["GET"])
@member_required
def settings_page(request):
    return _settings(request)


@require_POST
@member_required
def preferences(request):
    """A member's own choices: any role may set them, for themselves only."""
    form = _preference_form(request, request.POST)
    if not form.is_valid():
        return _settings(request, preference_form=form, status=400)
    preference_set(
        membership=request.membership,
        email_enabled=form.cleaned_data["email_enabled"],
        digest_minutes=form.cleaned_data["digest_minutes"],
    )
    messages.success(request, "Your notification preferences are saved.")
    return redirect("notifications:settings")


def _channel_page(request, form, channel=None, *, status=200, secret=""):
    context = {
        "nav": "notifications",
        "form": form,
        "channel": channel,
        "secret": secret,
        # Whether its page offers a new signing secret.
        "signs": channel is not None and transport_for(channel.kind).signs,
    }
    return render(request, "notifications/channel.html", context, status=status)


def _save(request, form: ChannelForm, channel: Channel | None):
    data = form.cleaned_data
    try:
        saved, secret = channel_save(
            tenant=request.membership.tenant,
            channel=channel,
            name=data["name"],
            kind=data["kind"],
            enabled=data["enabled"],
            email_roles=data["email_roles"],
            email_addresses=data["email_addresses"],
            url=data["url"],
            slack_channel=data["slack_channel"],
            kinds=data["kinds"],
            agents=data["agents"],
            tools=data["tools"],
            omit_arguments=data["omit_arguments"],
            member_email=data.get("member") or "",
            actor=request.user.subject,
            via="page",
        )
    except ChannelError as exc:
        form.add_error(exc.field if exc.field in form.fields else None, str(exc))
        return _channel_page(request, form, channel, status=400)
    if secret:
        # Shown once, on this response only: never in a redirect, a message or a log.
        return _channel_page(request, ChannelForm(initial=_initial(saved)), saved, secret=secret)
    messages.success(request, f"Saved the channel {saved.name}.")
    return redirect("notifications:settings")


def _initial(channel: Channel) -> dict:
    return {
        "name": channel.name,
        "kind": channel.kind,
        "enabled": channel.enabled,
        "email_roles": channel.email_roles,
        "email_addresses": ", ".join(channel.email_addresses),
        "kinds": channel.kinds,
        "agents": ", ".join(channel.agents),
        "tools": ", ".join(channel.tools),
        "slack_channel": channel.slack_channel,
        "omit_arguments": channel.omit_arguments,
        "member": channel.member.user.email if channel.member is not None else "",
    }


@require_http_methods(["GET", "POST"])
@member_required
def channel_new(request):
    require_admin(request.membership)
    if request.method == "GET":
        return _channel_page(request, ChannelForm(initial={"enabled": True}))
    form = ChannelForm(request.POST)
    if not form.is_valid():
        return _channel_page(request, form, status=400)
    return _save(request, form, None)


@require_http_methods(["GET", "POST"])
@member_required
def channel_edit(request, public_id: str):
    require_admin(request.membership)
    channel = _channel_or_404(request, public_id)
    if request.method == "GET":
        return _channel_page(request, ChannelForm(initial=_initial(channel)), channel)
    form = ChannelForm(request.POST)
    if not form.is_valid():
        return _channel_page(request, form, channel, status=400)
    return _save(request, form, channel)


@require_POST
@member_required
def channel_remove(request, public_id: str):
    require_admin(request.membership)
    channel = _channel_or_404(request, public_id)
    channel_delete(channel=channel, actor=request.user.subject, via="page")
    messages.success(request, f"Deleted the channel {channel.name}.")
    return redirect("notifications:settings")


@require_POST
@member_required
def channel_test_view(request, public_id: str):
    require_admin(request.membership)
    channel = _channel_or_404(request, public_id)
    channel_test(channel=channel)
    messages.info(request, f"A test notification is on its way through {channel.name}.")
    return redirect("notifications:settings")


@require_POST
@member_required
def channel_rotate(request, public_id: str):
    require_admin(request.membership)
    channel = _channel_or_404(request, public_id)
    try:
        secret = channel_secret_rotate(channel=channel, actor=request.user.subject)
    except ChannelError as exc:
        messages.error(request, str(exc))
        return redirect("notifications:channel_edit", public_id=channel.public_id)
    return _channel_page(request, ChannelForm(initial=_initial(channel)), channel, secret=secret)
