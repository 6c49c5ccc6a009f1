import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.views.decorators.debug import sensitive_post_parameters

from runtime import admin_push  # noqa: F401  (registers the push models' admin)
from runtime.admin_policy import PolicyTableField, tool_keys
from runtime.agents.agent_models import (
    Agent,
    AnnotationPolicy,
    Credential,
    ModelPrice,
    ToolServer,
)
from runtime.agents.agent_selectors import discovered_tools
from runtime.agents.agentfile import ladder_tools_problem
from runtime.agents.limits import limits_error
from runtime.agents.memory_budget import memory_error
from runtime.decisions.decision_models import Effect, Interaction, Receipt, StandingRule
from runtime.decisions.receipts import policy_version
from runtime.decisions.standing_rules import rule_revoke
from runtime.decisions.summaries import effect_call_view, redacted
from runtime.kernel.audit import audit_record
from runtime.kernel.errors import RuntimeFault
from runtime.kernel.task_models import AuditEvent, Task
from runtime.llm.credentials import credential_delete, credential_set
from runtime.llm.http_agent import ModelConfigError
from runtime.llm.http_agent import validate_model as http_model_validate
from runtime.llm.openai_spec import ModelSpecError
from runtime.llm.openai_spec import validate_model as openai_model_validate
from runtime.llm.registry import PROVIDERS
from runtime.llm.scripted import ScriptError, validate_script
from runtime.policy.checks import policy_tools_problems
from runtime.policy.rules import HINT_KINDS, HINT_WORDS, hint_defaults, hint_kind
from runtime.policy.title_syntax import call_terms
from runtime.tools.catalog import HINTS
from runtime.tools.schema_refs import schema_problem
from runtime.tools.servers import DiscoveryError, tool_server_refresh
from tenants.admin_scope import TenantScopedAdmin


class AgentForm(forms.ModelForm):
    policy = PolicyTableField(
        label="Tool policy and ladders",
        help_text="A row per tool: what happens to its calls, who decides, and the ladder of "
        "its approvals. Checked as AGENT.md's policy and ladder are.",
    )

    class Meta:
        model = Agent
        fields = [
            "tenant",
            "slug",
            "name",
            "description",
            "version",
            "skills",
            "default_skill",
            "instructions",
            "model",
            "tools",
            "connections_enabled",
            "public",
            "interaction_ttl_seconds",
        ]
        widgets = {
            "skills": forms.Textarea(attrs={"rows": 8, "cols": 100}),
            "model": forms.Textarea(attrs={"rows": 16, "cols": 100}),
            "tools": forms.Textarea(attrs={"rows": 10, "cols": 100}),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        agent = self.instance
        self.fields["policy"].initial = {
            "policy": agent.tool_policy or {},
            "ladder": agent.ladder or {},
        }
        self.fields["policy"].widget.offered = tool_keys(agent.tools)

    def clean_skills(self):
        skills = self.cleaned_data["skills"]
        if not isinstance(skills, list) or not all(
            isinstance(s, dict) and s.get("id") and s.get("name") and s.get("description")
            for s in skills
        ):
            raise forms.ValidationError("A list of {id, name, description, tags, examples}.")
        return skills

    def clean_tools(self):
        tools = self.cleaned_data["tools"]
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise forms.ValidationError("A list of {server, tool, schema, ...}.")
        # As AGENT.md's tools: a schema is a JSON Schema that refers to nothing outside it.
        for i, tool in enumerate(tools):
            if "schema" in tool:
                problem = schema_problem(tool["schema"])
                if problem is not None:
                    where = ".".join(map(str, [i, "schema", *problem[0]]))
                    raise forms.ValidationError(f"{where}: {problem[1]}")
        return tools

    def clean_model(self):
        model = self.cleaned_data["model"]
        provider = model.get("provider") if isinstance(model, dict) else None
        if provider not in PROVIDERS:
            raise forms.ValidationError(
                f'An object {{"provider": ..., ...}} with a provider of {sorted(PROVIDERS)}.'
            )
        # loop.limits, kept with the model (runtime.agents.limits).
        wrong = limits_error(model.get("limits", {}))
        if wrong:
            raise forms.ValidationError(f"limits: {'.'.join([*wrong[0], wrong[1]])}")
        # AGENT.md's memory, kept with the model too (runtime.agents.memory_budget).
        wrong = memory_error(model.get("memory", {}))
        if wrong:
            raise forms.ValidationError(f"memory: {'.'.join([*wrong[0], wrong[1]])}")
        mapping = {k: v for k, v in model.items() if k not in ("limits", "memory")}
        try:
            if provider == "scripted":
                validate_script(model.get("script", []))
            elif provider == "http":
                http_model_validate(mapping)
            else:
                openai_model_validate(mapping)
        except ScriptError as exc:
            raise forms.ValidationError(f"script: {exc}") from None
        except ModelConfigError as exc:
            raise forms.ValidationError(f"{exc.field}: {exc.message}") from None
        except ModelSpecError as exc:
            raise forms.ValidationError(f"model: {exc}") from None
        return model

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        default = cleaned.get("default_skill")
        skills = cleaned.get("skills")
        if default and isinstance(skills, list):
            ids = [s.get("id") for s in skills if isinstance(s, dict)]
            if default not in ids:
                self.add_error(
                    "default_skill",
                    f"{default!r} is not one of the skills ({', '.join(map(str, ids))}).",
                )
        document = cleaned.get("policy")
        if document is not None and "tools" in cleaned:
            # As AGENT.md: a ladder names only tools the agent has, and a conditional entry's
            # conditions only fields its tool's schema has.
            problem = ladder_tools_problem(document["ladder"], cleaned["tools"])
            tenant = cleaned.get("tenant") or (
                self.instance.tenant if self.instance.tenant_id else None
            )
            wrong = policy_tools_problems(
                document["policy"],
                cleaned["tools"],
                discovered_tools(tenant=tenant) if tenant is not None else None,
            )
            if problem:
                self.add_error("policy", f"ladder.tools.{problem[0]}: {problem[1]}")
            elif wrong:
                self.add_error(
                    "policy", [f"{'.'.join(map(str, path))}: {text}" for path, text in wrong]
                )
            else:
                self.instance.tool_policy = document["policy"]
                self.instance.ladder = document["ladder"]
        return cleaned


@admin.register(Agent)
class AgentAdmin(TenantScopedAdmin):
    form = AgentForm
    list_display = [
        "slug",
        "name",
        "tenant",
        "public",
        "connections_enabled",
        "version",
        "updated_at",
    ]
    list_filter = ["tenant", "public"]
    search_fields = ["slug", "name", "description"]
    list_select_related = ["tenant"]
    readonly_fields = ["policy_version_shown", "source_path", "created_at", "updated_at"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "tenant",
                    "slug",
                    "name",
                    "description",
                    "version",
                    "public",
                    "connections_enabled",
                    "interaction_ttl_seconds",
                ]
            },
        ),
        ("Tool policy and ladders", {"fields": ["policy", "policy_version_shown"]}),
        (
            "Skills, instructions, model and tools",
            {"fields": ["skills", "default_skill", "instructions", "model", "tools"]},
        ),
        ("Source", {"fields": ["source_path", "created_at", "updated_at"]}),
    ]

    @admin.display(description="policy version")
    def policy_version_shown(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        return format_html(
            "<code>{}</code><br>The version of the whole policy (the audit names it with each "
            "change). Receipts of decisions name the version of the entry, or rule of a "
            "conditional entry, that held the call: changing a tool's entry puts its approvals "
            "made under the older version to a person again, and leaves other tools' alone.",
            policy_version(obj),
        )

    def save_model(self, request, obj, form, change):
        before = (
            Agent.objects.filter(pk=obj.pk).values_list("tool_policy", flat=True).first()
            if change
            else None
        )
        obj.save()
        if change and before != obj.tool_policy:
            # Inside the admin's transaction: the policy and its audit row commit together.
            audit_record(
                tenant_id=obj.tenant_id,
                actor=request.user.subject,
                action="policy.changed",
                via="admin",
                detail={"agent": obj.slug, "version": policy_version(obj)},
            )


class ReadOnlyAdmin(TenantScopedAdmin):
    """Runtime records change only through the runtime's services, never by hand."""

    tenant_admin_may = ("view",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def pretty(value) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


# Redacted as on every surface but the decision page (docs/how-to/policy.md): a
# policy's ``redact`` fields are ``•••`` in admin's read-only pages too.


def _call_redacted(call, fields) -> dict:
    """A recorded call (``request["call"]``) with its arguments and the arguments shown
    redacted."""
    if not isinstance(call, dict):
        return call
    shown = dict(call)
    for key in ("arguments", "shownArguments"):
        if isinstance(shown.get(key), dict):
            shown[key] = redacted(shown[key], fields)
    return shown


def interaction_shown(interaction: Interaction) -> dict:
    """An interaction's request and answer as admin shows them."""
    request = interaction.request if isinstance(interaction.request, dict) else {}
    call = request.get("call")
    fields = call_terms(call).get("redact", ())
    answer = interaction.answer
    if isinstance(answer, dict) and isinstance(answer.get("arguments"), dict):
        answer = {**answer, "arguments": redacted(answer["arguments"], fields)}
    if isinstance(call, dict):
        request = {**request, "call": _call_redacted(call, fields)}
    return {"request": request, "answer": answer}


def effect_arguments_shown(effect: Effect) -> dict:
    interaction = Interaction.objects.filter(
        tenant_id=effect.tenant_id, public_id=effect.public_id
    ).first()
    view = effect_call_view(effect, agent=effect.task.agent, interaction=interaction)
    return view["arguments"]


def transcript_shown(task: Task) -> list:
    """The transcript with each journalled call's arguments (and an edited approval's)
    redacted under the terms its effect is shown with."""
    effects = list(task.effects.all())
    interactions = {
        i.public_id: i
        for i in Interaction.objects.filter(
            tenant_id=task.tenant_id, public_id__in=[e.public_id for e in effects]
        )
    }
    by_step = {
        e.step: effect_call_view(e, agent=task.agent, interaction=interactions.get(e.public_id))
        for e in effects
    }
    # An edited approval's answer entry names its call's step; its terms are its approval's.
    fields_at: dict[object, Any] = {
        e.step: call_terms((interactions[e.public_id].request or {}).get("call")).get("redact", ())
        for e in effects
        if e.public_id in interactions
    }
    shown = []
    for entry in task.transcript or []:
        if not isinstance(entry, dict):
            shown.append(entry)
            continue
        step = entry.get("step")
        action = entry.get("action")
        if (
            entry.get("type") == "action"
            and isinstance(action, dict)
            and step in by_step
            and "arguments" in action
        ):
            entry = {**entry, "action": {**action, "arguments": by_step[step]["arguments"]}}
        elif entry.get("type") == "answer" and isinstance(entry.get("arguments"), dict):
            entry = {**entry, "arguments": redacted(entry["arguments"], fields_at.get(step, ()))}
        shown.append(entry)
    return shown


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    ordering = ["-pk"]  # newest first, and a stable order for pages and autocomplete
    list_display = ["public_id", "tenant", "agent", "subject", "state", "status_timestamp"]
    list_filter = ["state", "tenant"]
    search_fields = ["public_id", "wire_context_id", "subject", "trace_id"]
    list_select_related = ["tenant", "agent"]
    exclude = ["transcript", "history", "artifacts", "status_message", "runs"]
    readonly_fields = ["transcript_pretty", "runs_pretty"]

    @admin.display(description="transcript")
    def transcript_pretty(self, obj):
        return pretty(transcript_shown(obj))

    @admin.display(description="runs")
    def runs_pretty(self, obj):
        return pretty(obj.runs)


@admin.register(Interaction)
class InteractionAdmin(ReadOnlyAdmin):
    ordering = ["-pk"]  # newest first, and a stable order for pages and autocomplete
    list_display = ["public_id", "tenant", "kind", "state", "prompt", "answered_by", "expires_at"]
    list_filter = ["kind", "state", "tenant"]
    search_fields = ["public_id", "prompt", "answered_by"]
    list_select_related = ["tenant"]
    exclude = ["request", "answer", "search_text"]
    readonly_fields = ["request_shown", "answer_shown"]

    @admin.display(description="request")
    def request_shown(self, obj):
        return pretty(interaction_shown(obj)["request"])

    @admin.display(description="answer")
    def answer_shown(self, obj):
        return pretty(interaction_shown(obj)["answer"])


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    ordering = ["-pk"]  # newest first, and a stable order for pages and autocomplete
    list_display = ["public_id", "tenant", "server", "tool", "state", "approved_by", "created_at"]
    list_filter = ["state", "server", "tenant"]
    search_fields = ["public_id", "server", "tool"]
    list_select_related = ["tenant"]
    exclude = ["arguments"]
    readonly_fields = ["arguments_shown"]

    @admin.display(description="arguments")
    def arguments_shown(self, obj):
        return pretty(effect_arguments_shown(obj))


@admin.register(StandingRule)
class StandingRuleAdmin(ReadOnlyAdmin):
    """Rules are made from decisions and revoked on the rules page (their audit), not here."""

    list_display = [
        "public_id",
        "tenant",
        "agent",
        "server",
        "tool",
        "caller",
        "expires_at",
        "revoked_at",
        "uses",
    ]
    list_filter = ["tenant", "server"]
    search_fields = ["public_id", "server", "tool", "caller", "created_by"]
    list_select_related = ["tenant", "agent"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected rules (audited, as on the rules page)")
    def revoke(self, request, queryset):
        done = 0
        for rule in queryset.filter(revoked_at__isnull=True).select_related("tenant"):
            try:
                with transaction.atomic():
                    rule_revoke(
                        tenant=rule.tenant,
                        rule_id=rule.public_id,
                        by=request.user.subject,
                        via="admin",
                    )
            except RuntimeFault as exc:  # revoked meanwhile, on the rules page
                self.message_user(request, exc.message, messages.WARNING)
                continue
            done += 1
        self.message_user(request, f"Revoked {done} rule(s).", messages.SUCCESS)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "tenant", "actor", "action", "via"]
    list_filter = ["action", "via", "tenant"]
    search_fields = ["actor"]
    list_select_related = ["tenant"]


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    """Decision receipts: append-only, like the audit log (no add, change or delete)."""

    list_display = [
        "created_at",
        "tenant",
        "decision",
        "server",
        "tool",
        "decider",
        "channel",
        "edited",
        "stepped_up",
    ]
    list_filter = ["decision", "channel", "edited", "tenant"]
    search_fields = ["public_id", "task_public_id", "effect_public_id", "decider"]
    list_select_related = ["tenant"]


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


@admin.register(ToolServer)
class ToolServerAdmin(TenantScopedAdmin):
    """A tenant's MCP and HTTP tool servers: tools discovered with "Refresh tools" and cached;
    an HTTP server's signing secret is made with the server and shown once."""

    list_display = ["name", "tenant", "kind", "url", "app", "active", "tool_count", "refreshed_at"]
    list_filter = ["kind", "active", "tenant"]
    search_fields = ["name", "url"]
    list_select_related = ["tenant", "app"]
    fields = [
        "tenant",
        "name",
        "kind",
        "url",
        "app",
        "timeout_seconds",
        "active",
        "signing_secret",
        "refreshed_at",
        "refresh_error",
        "discovered_tools",
        "created_at",
    ]
    readonly_fields = [
        "signing_secret",
        "refreshed_at",
        "refresh_error",
        "discovered_tools",
        "created_at",
    ]
    actions = ["refresh_tools", "rotate_signing_secret"]
    change_form_template = "runtime/admin/toolserver_change_form.html"

    @admin.display(description="tools")
    def tool_count(self, obj: ToolServer) -> int:
        return len(obj.tools or [])

    @admin.display(description="signing secret")
    def signing_secret(self, obj: ToolServer) -> str:
        # The secret itself is never rendered again; only whether there is one.
        return "set (shown once, when made)" if obj.signing_secret_encrypted else "—"

    @admin.display(description="discovered tools")
    def discovered_tools(self, obj: ToolServer):
        if not obj.tools:
            return "none yet: use Refresh tools"
        # What the tenant's annotation default makes of each tool that no agent's policy names.
        defaults = hint_defaults(obj.tenant_id)
        rows = format_html_join(
            "",
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    tool.get("name", ""),
                    hints_text(tool.get("annotations")),
                    HINT_WORDS[hint_kind(tool.get("annotations"))],
                    defaults[hint_kind(tool.get("annotations"))],
                )
                for tool in obj.tools
            ),
        )
        return format_html(
            '<table class="tool-hints"><thead><tr><th>tool</th><th>annotations</th>'
            "<th>kind</th><th>default decision</th></tr></thead><tbody>{}</tbody></table>"
            '<p class="help">The default decision applies to calls of a tool that no entry of '
            "the agent's policy names (<code>{}/TOOL</code> or <code>{}</code>); it is the "
            "tenant's, set in Tool annotation defaults.</p>{}",
            rows,
            obj.name,
            obj.name,
            pretty(obj.tools),
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.readonly_fields
        # A server's tenant is its identity: its agents, policies and connection are that
        # tenant's; make a new server for another tenant.
        return [*self.readonly_fields, "tenant"]

    def save_model(self, request, obj, form, change):
        if not change:
            request._countersign_secret = obj.signing_secret_new()
        obj.save()

    def response_add(self, request, obj, post_url_continue=None):
        secret = getattr(request, "_countersign_secret", None)
        if obj.kind != ToolServer.Kind.HTTP or not secret:
            return super().response_add(request, obj, post_url_continue)
        return self.secrets_page(request, "Tool server created", [(obj, secret)])

    def secrets_page(self, request, title: str, secrets: list) -> TemplateResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "secrets": secrets,
            "opts": self.model._meta,
        }
        # Rendered straight from the POST: the secret is in no session, log or URL.
        response = TemplateResponse(request, "runtime/admin/toolserver_secret.html", context)
        response["Cache-Control"] = "no-store"
        return response

    def get_urls(self):
        return [
            path(
                "<int:object_id>/refresh/",
                self.admin_site.admin_view(self.refresh_view),
                name="runtime_toolserver_refresh",
            ),
            *super().get_urls(),
        ]

    def refresh_one(self, request, server: ToolServer) -> bool:
        try:
            tools = tool_server_refresh(server=server)
        except DiscoveryError as exc:
            self.message_user(request, f"Tool server {server.name}: {exc}", messages.ERROR)
            return False
        names = ", ".join(t["name"] for t in tools) or "none"
        self.message_user(
            request,
            f"Tool server {server.name}: found {len(tools)} tool(s): {names}.",
            messages.SUCCESS,
        )
        return True

    def refresh_view(self, request, object_id: int):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        # The changelist's scope: another tenant's server is a 404, as a missing one.
        server = get_object_or_404(
            self.get_queryset(request).select_related("tenant", "app"), pk=object_id
        )
        if not self.has_change_permission(request, server):
            return HttpResponseRedirect(reverse("admin:index"))
        self.refresh_one(request, server)
        return HttpResponseRedirect(reverse("admin:runtime_toolserver_change", args=[server.pk]))

    @admin.action(description="Refresh tools (discover what the servers offer)")
    def refresh_tools(self, request, queryset):
        for server in queryset.select_related("tenant", "app"):
            self.refresh_one(request, server)

    @admin.action(description="Rotate the signing secret (HTTP servers; shown once)")
    def rotate_signing_secret(self, request, queryset):
        rotated = []
        for server in queryset.filter(kind=ToolServer.Kind.HTTP).select_related("tenant"):
            secret = server.signing_secret_new()
            server.save(update_fields=["signing_secret_encrypted"])
            rotated.append((server, secret))
        if not rotated:
            self.message_user(request, "No HTTP tool server was selected.", messages.WARNING)
            return None
        return self.secrets_page(request, "Signing secrets rotated", rotated)


def hints_text(annotations) -> str:
    """A tool's kept annotations as admin lists them: "readOnlyHint, openWorldHint: false"."""
    hints = annotations if isinstance(annotations, dict) else {}
    words = [name if hints[name] is True else f"{name}: false" for name in HINTS if name in hints]
    return ", ".join(words) or "none"


@admin.register(AnnotationPolicy)
class AnnotationPolicyAdmin(TenantScopedAdmin):
    """A tenant's default policy for its tool servers' tools by their MCP annotations
    (runtime.policy.rules): one row per tenant; without it, read-only tools run and the
    rest wait for a person. An agent's policy entry for the tool (or server) always wins."""

    list_display = ["tenant", "read_only", "additive", "destructive", "unknown", "updated_at"]
    list_select_related = ["tenant"]
    fields = ["tenant", "read_only", "additive", "destructive", "unknown", "updated_at"]
    readonly_fields = ["updated_at"]

    def save_model(self, request, obj, form, change):
        obj.save()
        # Inside the admin's transaction: who changed what tools run unasked is audited.
        audit_record(
            tenant_id=obj.tenant_id,
            actor=request.user.subject,
            action="annotation_policy.changed",
            via="admin",
            detail={kind: obj.action_for(kind) for kind in HINT_KINDS},
        )
