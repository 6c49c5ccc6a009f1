"""The Slack app in Django admin (its secrets set, never shown), and a read-only view of what
Slack said of its users."""

from django import forms
from django.contrib import admin

from integrations.slack.models import SlackApp, SlackUser
from integrations.slack.settings import (
    SlackAppError,
    request_url,
    slack_app_check,
    slack_app_save,
)
from tenants.admin_scope import TenantScopedAdmin


class SlackAppAdminForm(forms.ModelForm):
    bot_token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Bot User OAuth Token, xoxb-… (stored encrypted; empty keeps the current one).",
    )
    signing_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Signing Secret (stored encrypted; empty keeps the current one).",
    )
    app_token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="App-Level Token for Socket Mode, xapp-… (optional; stored encrypted; empty "
        "keeps the current one).",
    )
    app_token_remove = forms.BooleanField(
        required=False, label="Stop using Socket Mode (forget the app-level token)"
    )

    class Meta:
        model = SlackApp
        fields = ["tenant"]

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if self.errors:
            return data
        tenant = data.get("tenant") or self.instance.tenant
        try:
            slack_app_check(
                tenant=tenant,
                bot_token=data.get("bot_token", ""),
                signing_secret=data.get("signing_secret", ""),
                app_token=data.get("app_token", ""),
            )
        except SlackAppError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


@admin.register(SlackApp)
class SlackAppAdmin(TenantScopedAdmin):
    form = SlackAppAdminForm
    list_display = ["tenant", "bot_token_hint", "app_token_hint", "updated_at"]
    readonly_fields = ["bot_token_hint", "app_token_hint", "interactivity_request_url"]

    @admin.display(description="Interactivity Request URL")
    def interactivity_request_url(self, obj):
        return request_url(obj.tenant) if obj and obj.pk else "-"

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        saved = slack_app_save(
            tenant=obj.tenant,
            bot_token=data.get("bot_token", ""),
            signing_secret=data.get("signing_secret", ""),
            app_token=data.get("app_token", ""),
            app_token_remove=data.get("app_token_remove", False),
        )
        obj.pk = saved.pk


@admin.register(SlackUser)
class SlackUserAdmin(TenantScopedAdmin):
    list_display = ["slack_user_id", "email", "tenant", "checked_at"]
    search_fields = ["slack_user_id", "email"]
    readonly_fields = ["tenant", "slack_user_id", "email", "checked_at"]
    tenant_admin_may = ("view", "delete")

    def has_add_permission(self, request):
        return False
