"""API tokens in Django admin: made here (the plaintext shown once, with a copy button, and
only its hash kept), changed and revoked here, each audited (``token.created``,
``token.changed``, ``token.revoked``). A token that calls some agents only chooses them from a
list of the tenant's own agents and MCP gateways (the core's module: tenants, below the
agents, cannot read them)."""

from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from runtime.agents.agent_models import Agent
from runtime.kernel.audit import audit_record
from tenants.admin_scope import TenantScopedAdmin, admin_scope, scoped_choices
from tenants.models import ApiToken
from tenants.tokens import api_token_revoke, token_issue

# What an admin sets when making a token (the form and the add page show the same fields).
TOKEN_CREATE_FIELDS = (
    "tenant",
    "kind",
    "subject",
    "name",
    "all_agents",
    "agent_slugs",
    "may_step_up",
    "expires_at",
)


# What a token's audit rows say of it (its secret never).
AUDITED = ("kind", "subject", "name", "all_agents", "agent_slugs", "may_step_up", "expires_at")


def token_value(source, name: str):
    value = source.get(name) if isinstance(source, dict) else getattr(source, name)
    if name == "agent_slugs":
        return sorted(value or [])
    return value.isoformat() if isinstance(value, datetime) else value


def token_audited(request, token: ApiToken, action: str, detail: dict) -> None:
    audit_record(
        tenant_id=token.tenant_id,
        actor=request.user.subject,
        action=action,
        via="admin",
        detail={"token": f"cs_{token.prefix}_…", **detail},
    )


def agent_choices(agents, *, by_tenant: bool) -> list:
    """The checkboxes of ``agents``: agents and MCP gateways in groups of their own (each
    tenant's, for platform staff choosing before the tenant is known)."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for agent in agents:
        what = "MCP gateways" if agent.is_gateway else "Agents"
        group = f"{agent.tenant.slug}: {what}" if by_tenant else what
        label = agent.slug if agent.name == agent.slug else f"{agent.name} ({agent.slug})"
        groups.setdefault(group, []).append((agent.slug, label))
    return [(group, choices) for group, choices in sorted(groups.items())]


class ApiTokenForm(forms.ModelForm):
    agent_slugs = forms.MultipleChoiceField(
        required=False,
        label="Agents and MCP gateways",
        widget=forms.CheckboxSelectMultiple,
        help_text='When "all agents" is off: the agents and MCP gateways this token may call.',
    )
    # Set per request by ApiTokenAdmin.get_form: the scope's agents, grouped.
    agent_choices: list = []

    class Meta:
        model = ApiToken
        fields = list(TOKEN_CREATE_FIELDS)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.fields.get("agent_slugs")
        if not isinstance(field, forms.MultipleChoiceField):
            return
        choices = list(self.agent_choices)
        offered = {slug for _, group in choices for slug, _ in group}
        # A slug the token names with no agent behind it now (a shell-made token, an agent
        # deleted): offered as it is, so that saving the form keeps it unless unticked.
        gone = [s for s in (self.instance.agent_slugs or []) if s not in offered]
        if gone:
            choices.append(("No such agent now", [(s, s) for s in gone]))
        field.choices = choices

    def clean(self):
        super().clean()
        data = self.cleaned_data
        slugs = data.get("agent_slugs") or []
        tenant = data.get("tenant") or getattr(self.instance, "tenant", None)
        if tenant is not None and slugs:
            known = set(
                Agent.objects.filter(tenant=tenant, slug__in=slugs).values_list("slug", flat=True)
            ) | set(self.instance.agent_slugs or [])
            strangers = [s for s in slugs if s not in known]
            if strangers:
                self.add_error(
                    "agent_slugs", f"Not an agent of {tenant.slug}: {', '.join(strangers)}."
                )
        if not data.get("all_agents") and not slugs and "agent_slugs" not in self.errors:
            self.add_error("agent_slugs", "Choose at least one agent, or allow all agents.")
        if data.get("may_step_up") and data.get("kind") != ApiToken.Kind.OPERATOR:
            self.add_error("may_step_up", "Only operator tokens decide, so only they step up.")
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(TenantScopedAdmin):
    """A tenant's tokens: made here (the plaintext shown once), revoked here; a tenant's
    admin revokes rather than deletes, so that "who revoked it, when" stays."""

    form = ApiTokenForm
    tenant_admin_may = ("view", "add", "change")
    list_display = [
        "name",
        "kind",
        "subject",
        "tenant",
        "masked",
        "may_step_up",
        "scope",
        "expires_at",
        "revoked_at",
        "revoked_by",
        "last_used_at",
    ]
    list_filter = ["tenant", "kind", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "subject", "prefix"]
    list_select_related = ["tenant"]
    readonly_fields = [
        "masked",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
        "revoked_by",
    ]
    actions = ["revoke"]

    @admin.display(description="token")
    def masked(self, obj: ApiToken) -> str:
        # The prefix identifies the token in logs and support tickets; the secret is never kept.
        return f"cs_{obj.prefix}_…" if obj.prefix else "—"

    @admin.display(description="may call")
    def scope(self, obj: ApiToken) -> str:
        return "all agents" if obj.all_agents else ", ".join(obj.agent_slugs or []) or "no agent"

    def get_fields(self, request, obj=None):
        if obj is None:
            return list(TOKEN_CREATE_FIELDS)
        return [
            "masked",
            *TOKEN_CREATE_FIELDS,
            "revoked_at",
            "revoked_by",
            "last_used_at",
            "created_by",
            "created_at",
        ]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        # A token's tenant and subject are its identity; mint a new token to change them.
        # The step-up right is given when the token is made, never added later.
        return [*self.readonly_fields, "tenant", "kind", "subject", "may_step_up"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        scope = admin_scope(request)
        tenant = obj.tenant if obj is not None else scope.tenant
        agents = scoped_choices(Agent, Agent.objects.select_related("tenant"), request)
        if tenant is not None:
            agents = agents.filter(tenant=tenant)
        agents = agents.only("slug", "name", "model", "tenant__slug").order_by(
            "tenant__slug", "slug"
        )
        # get_form makes a new class on each call (modelform_factory): this request's own.
        form.agent_choices = agent_choices(agents, by_tenant=tenant is None)
        return form

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
            request._countersign_plaintext = token_issue(obj)
        obj.save()
        # Audited with what it may do, never its secret (the prefix names it).
        if not change:
            detail = {name: token_value(obj, name) for name in AUDITED}
            token_audited(request, obj, "token.created", detail)
        elif form.changed_data:
            changed = {
                name: [token_value(form.initial, name), token_value(obj, name)]
                for name in AUDITED
                if name in form.changed_data
            }
            token_audited(request, obj, "token.changed", {"changed": changed})

    def response_add(self, request, obj, post_url_continue=None):
        plaintext = getattr(request, "_countersign_plaintext", None)
        context = {
            **self.admin_site.each_context(request),
            "title": "Token created",
            "token": obj,
            "plaintext": plaintext,
            "opts": self.model._meta,
        }
        # Rendered straight from the POST: the plaintext is in no session, log or URL, and no
        # later page can show it again.
        response = TemplateResponse(request, "tenants/admin/token_created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        revoked = 0
        for token in queryset:
            if api_token_revoke(token=token, by=request.user.subject):
                revoked += 1
                token_audited(request, token, "token.revoked", {})
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
