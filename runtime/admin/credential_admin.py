"""Django admin's pages of model providers' credentials (write-only secrets, audited
deletes) and of the per-model price table."""

from django import forms
from django.contrib import admin, messages
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from runtime.agents.agent_models import Credential, ModelPrice
from runtime.llm.credentials import credential_delete, credential_set
from tenants.admin_scope import TenantScopedAdmin


class CredentialForm(forms.ModelForm):
    """The secret is a write-only field: typed once, never rendered back (not even masked)."""

    secret = forms.CharField(
        required=False,
        strip=True,
        max_length=8192,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted and never shown again. On a change, leave it blank to keep "
        "the current secret; whatever you type replaces it.",
    )

    class Meta:
        model = Credential
        fields = ["tenant", "name"]

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        if self.instance.pk is None and not cleaned.get("secret"):
            self.add_error("secret", "Type the secret to store.")
        return cleaned


@admin.register(Credential)
class CredentialAdmin(TenantScopedAdmin):
    """Tenants' secrets for model providers (AGENT.md's model.credential), set here, shown once.
    A tenant's admin sets their tenant's; platform staff any tenant's."""

    form = CredentialForm
    list_display = ["name", "tenant", "secret_status", "updated_at", "created_by"]
    list_filter = ["tenant"]
    search_fields = ["name", "tenant__slug"]
    list_select_related = ["tenant", "created_by"]
    actions = ["delete_audited"]

    def get_queryset(self, request):
        # The ciphertext has no business on an admin page; not even loaded.
        return super().get_queryset(request).defer("secret_encrypted")

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "name", "secret"]
        return [
            "tenant",
            "name",
            "secret_status",
            "secret",
            "created_by",
            "created_at",
            "updated_at",
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        # Renaming would silently break the agents that name it: add a new one instead.
        return ["tenant", "name", "secret_status", "created_by", "created_at", "updated_at"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # in favour of the audited delete below
        return actions

    @method_decorator(sensitive_post_parameters("secret"))
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        # Keeps the secret out of Django's error reports, should the request ever fail.
        return super().changeform_view(request, object_id, form_url, extra_context)

    @admin.display(description="secret")
    def secret_status(self, obj):
        if obj is None or obj.pk is None:
            return "not set"
        ending = f", ending {obj.secret_hint}" if obj.secret_hint else ""
        return f"set{ending} (last changed {obj.updated_at:%Y-%m-%d %H:%M} UTC)"

    def save_model(self, request, obj, form, change):
        saved, _ = credential_set(
            tenant=obj.tenant,
            name=obj.name,
            secret=form.cleaned_data.get("secret") or None,
            by=request.user,
        )
        # The admin's redirect and its history entry name the row the service saved.
        obj.pk = saved.pk
        obj.updated_at = saved.updated_at

    def delete_model(self, request, obj):
        credential_delete(credential=obj, by=request.user)

    @admin.action(description="Delete the selected credentials (audited)", permissions=["delete"])
    def delete_audited(self, request, queryset):
        done = 0
        for credential in queryset.select_related("tenant"):
            credential_delete(credential=credential, by=request.user)
            done += 1
        self.message_user(request, f"Deleted {done} credential(s).", messages.SUCCESS)


@admin.register(ModelPrice)
class ModelPriceAdmin(TenantScopedAdmin):
    """Overrides of settings.MODEL_PRICES, which telemetry/v1's costUsd is computed from."""

    list_display = ["model", "input_usd_per_million", "output_usd_per_million", "updated_at"]
    search_fields = ["model"]
