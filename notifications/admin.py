"""Notifications in Django admin: channels (only the chosen medium's fields; secrets set,
never shown; a test sent from the list or the page), ladders, deliveries with their attempts,
members' preferences."""

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse

from notifications.channel_settings import (
    ChannelError,
    channel_check,
    channel_delete,
    channel_save,
    channel_test_send,
)
from notifications.forms import FILTER_FIELDS, MEDIUM_FIELDS, ChannelForm
from notifications.ladders import steps_clean, steps_stored
from notifications.models import Attempt, Channel, Delivery, Ladder, Preference
from notifications.transports import TRANSPORTS, transport_for
from tenants.admin_scope import TenantScopedAdmin, TenantScopedInline
from tenants.models import Membership

# Tests sent at once by the change list's action: each waits for its medium's answer (up to
# NOTIFY_TIMEOUT_SECONDS), and the page waits for them all.
MAX_TESTS = 3


class ChannelAdminForm(ChannelForm, forms.ModelForm):
    """The settings page's fields (notifications.forms.ChannelForm), as a model form. Only the
    chosen medium's fields are checked and kept: a page without JavaScript shows every
    medium's section, and what was typed into another medium's is ignored."""

    class Meta:
        model = Channel
        fields = ["tenant", "name", "kind", "enabled", *MEDIUM_FIELDS, *FILTER_FIELDS]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            # Lists shown as the text the fields take (comma-separated words).
            for name in ("email_addresses", "agents", "tools"):
                self.initial[name] = ", ".join(getattr(self.instance, name) or [])
            member = self.instance.member
            self.initial["member"] = member.user.email if member is not None else ""

    def chosen_kind(self) -> str:
        return self.instance.kind if self.instance.pk else self.cleaned_data.get("kind", "")

    def clean(self):
        super().clean()
        data = self.cleaned_data
        kind = self.chosen_kind()
        own = transport_for(kind).fields if kind in TRANSPORTS else ()
        for name in MEDIUM_FIELDS:
            if name not in own:
                # Another medium's field: never an error, never kept.
                self.errors.pop(name, None)
                data[name] = [] if name.startswith("email_") else ""
        member, tenant = data.get("member"), data.get("tenant")
        if member and tenant is not None:
            if not Membership.objects.filter(tenant=tenant, user__email__iexact=member).exists():
                self.add_error("member", f"No member of {tenant.slug} has this e-mail address.")
        if self.errors or not kind:
            return data
        try:
            channel_check(
                tenant=data["tenant"],
                channel=Channel.objects.get(pk=self.instance.pk) if self.instance.pk else None,
                name=data["name"],
                kind=kind,
                email_roles=data.get("email_roles") or [],
                email_addresses=data.get("email_addresses") or [],
                url=data.get("url", ""),
                slack_channel=data.get("slack_channel", ""),
            )
        except ChannelError as exc:
            # Next to the field it is about (the URL, the recipients), else at the top.
            self.add_error(exc.field if exc.field in self.fields else None, str(exc))
        return data


def medium_fieldsets(kinds: list[str]) -> list[tuple[str, dict]]:
    """One section per medium's own fields (the hooks share theirs, the URL), each marked
    with the kinds it belongs to: static/admin-console.js shows the chosen kind's only."""
    sections: dict[tuple[str, ...], list[str]] = {}
    for kind in kinds:
        fields = transport_for(kind).fields
        if fields:
            sections.setdefault(fields, []).append(kind)
    labels = dict(Channel.Kind.choices)
    return [
        (
            transport_for(owners[0]).fields_title,
            {
                "fields": list(fields),
                "classes": ["channel-medium", *(f"medium-{kind}" for kind in owners)],
                "description": "For: " + "; ".join(str(labels[kind]) for kind in owners) + ".",
            },
        )
        for fields, owners in sections.items()
    ]


@admin.register(Channel)
class ChannelAdmin(TenantScopedAdmin):
    form = ChannelAdminForm
    list_display = ["name", "tenant", "kind", "enabled", "omit_arguments", "url_hint"]
    list_filter = ["kind", "enabled", "tenant"]
    readonly_fields = ["public_id", "url_hint"]
    actions = ["send_test"]
    change_form_template = "notifications/admin/channel_change_form.html"
    # The form's "member" is an e-mail address, which channel_save turns into the member: the
    # model's field is never set from it as it is.
    exclude = ["member"]

    class Media:
        js = ["admin-console.js"]

    def get_fieldsets(self, request, obj=None):
        head = ["tenant", "name", "kind", "enabled", "member"]
        if obj is not None:
            head += ["public_id", "url_hint"]
        kinds = [obj.kind] if obj is not None else list(TRANSPORTS)
        return [
            (None, {"fields": head}),
            *medium_fieldsets(kinds),
            ("What it tells of", {"fields": list(FILTER_FIELDS)}),
        ]

    def get_readonly_fields(self, request, obj=None):
        # A channel's medium is chosen when it is made (its secrets are that medium's).
        return [*self.readonly_fields, "kind"] if obj is not None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        try:
            saved, secret = channel_save(
                tenant=data["tenant"],
                channel=Channel.objects.get(pk=obj.pk) if change else None,
                name=data["name"],
                kind=form.chosen_kind(),
                enabled=data["enabled"],
                email_roles=data["email_roles"] or [],
                email_addresses=data["email_addresses"] or [],
                url=data.get("url", ""),
                slack_channel=data.get("slack_channel", ""),
                kinds=data["kinds"] or [],
                agents=data["agents"] or [],
                tools=data["tools"] or [],
                omit_arguments=data["omit_arguments"],
                member_email=data.get("member") or "",
                actor=request.user.subject,
            )
        except ChannelError as exc:
            self.message_user(request, f"Not saved: {exc}", level="error")
            return
        # The admin's log entry and the redirect name the row saved.
        obj.pk, obj.public_id = saved.pk, saved.public_id
        if secret:
            # Not shown here: admin messages travel in a cookie. The settings page shows a
            # new secret once, on its own response.
            self.message_user(
                request,
                'A signing secret was made. To see one, use "New signing secret" on the '
                "channel's page under Notifications.",
            )

    def delete_model(self, request, obj):
        channel_delete(channel=obj, actor=request.user.subject)

    def delete_queryset(self, request, queryset):
        for channel in queryset:
            channel_delete(channel=channel, actor=request.user.subject)

    def get_urls(self):
        urls = [
            path(
                "<path:object_id>/send-test/",
                self.admin_site.admin_view(self.send_test_view),
                name="notifications_channel_send_test",
            )
        ]
        return urls + super().get_urls()

    def send_test_view(self, request, object_id):
        """The change page's "Send a test" button (a POST: it sends a message)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        channel = self.get_object(request, unquote(object_id))  # another tenant's: a 404
        if not self.has_change_permission(request, channel):
            raise PermissionDenied
        self.test_sent(request, channel)
        return HttpResponseRedirect(
            reverse("admin:notifications_channel_change", args=[channel.pk])
        )

    @admin.action(description="Send a test notification", permissions=["change"])
    def send_test(self, request, queryset):
        for channel in queryset[:MAX_TESTS]:
            self.test_sent(request, channel)
        if queryset.count() > MAX_TESTS:
            self.message_user(
                request, f"Sent {MAX_TESTS} tests; choose fewer channels.", messages.WARNING
            )

    def test_sent(self, request, channel: Channel) -> None:
        """Send one now and say what the medium answered (its error, never a 500)."""
        error = channel_test_send(channel=channel, actor=request.user.subject)
        if error:
            self.message_user(
                request, f"The test through {channel.name} failed: {error}", messages.ERROR
            )
        else:
            self.message_user(request, f"Sent a test through {channel.name}.", messages.SUCCESS)


class LadderAdminForm(forms.ModelForm):
    class Meta:
        model = Ladder
        fields = ["tenant", "agent", "tool", "steps"]

    def clean(self):
        super().clean()
        data = self.cleaned_data
        agent, tenant = data.get("agent"), data.get("tenant")
        if agent is not None and tenant is not None and agent.tenant_id != tenant.pk:
            self.add_error("agent", "This agent belongs to another tenant.")
        return data

    def clean_steps(self):
        try:
            cleaned = steps_clean(self.cleaned_data["steps"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return steps_stored(cleaned)


@admin.register(Ladder)
class LadderAdmin(TenantScopedAdmin):
    form = LadderAdminForm
    list_display = ["tenant", "agent", "tool", "steps_text"]
    list_filter = ["tenant"]

    @admin.display(description="steps")
    def steps_text(self, obj):
        return json.dumps(obj.steps)


class AttemptInline(TenantScopedInline, admin.TabularInline):
    model = Attempt
    tenant_admin_may = ("view",)
    extra = 0
    can_delete = False
    readonly_fields = ["number", "at", "ok", "status_code", "error"]


@admin.register(Delivery)
class DeliveryAdmin(TenantScopedAdmin):
    list_display = ["channel", "interaction", "event", "step", "state", "attempts", "created_at"]
    list_filter = ["state", "event", "tenant"]
    readonly_fields = [f.name for f in Delivery._meta.fields]
    inlines = [AttemptInline]
    tenant_admin_may = ("view",)

    def has_add_permission(self, request):
        return False


@admin.register(Preference)
class PreferenceAdmin(TenantScopedAdmin):
    list_display = ["membership", "email_enabled", "digest_minutes", "last_digest_at"]
