"""Django admin's agent page: an agent's card fields, its model and tools, and its tool policy
and ladders as a table (policy_table), each checked as AGENT.md's are."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from runtime.admin.policy_table import PolicyTableField, tool_keys
from runtime.agents.agent_models import Agent, PolicyVersion
from runtime.agents.agent_selectors import discovered_tools
from runtime.agents.agentfile import ladder_tools_problem
from runtime.agents.limits import limits_error
from runtime.agents.memory_budget import memory_error
from runtime.agents.policy_history import (
    agent_policy_document,
    policy_change_record,
    policy_diff,
    policy_document,
    policy_origin,
    policy_restore,
)
from runtime.decisions.receipts import policy_version
from runtime.llm.http_agent import ModelConfigError
from runtime.llm.http_agent import validate_model as http_model_validate
from runtime.llm.openai_spec import ModelSpecError
from runtime.llm.openai_spec import validate_model as openai_model_validate
from runtime.llm.registry import PROVIDERS
from runtime.llm.scripted import ScriptError, validate_script
from runtime.policy.checks import policy_tools_problems
from runtime.tools.schema_refs import schema_problem
from tenants.admin_scope import TenantScopedAdmin

# The newest versions of a policy its page lists (the audit log keeps every change).
HISTORY_SHOWN = 20


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
    readonly_fields = [
        "policy_version_shown",
        "policy_origin_shown",
        "policy_history_shown",
        "source_path",
        "created_at",
        "updated_at",
    ]
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
        (
            "Tool policy and ladders",
            {
                "fields": [
                    "policy",
                    "policy_version_shown",
                    "policy_origin_shown",
                    "policy_history_shown",
                ]
            },
        ),
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

    @admin.display(description="policy from")
    def policy_origin_shown(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        origin = policy_origin(obj)
        if origin is None:
            return obj.source_path or "—"
        return origin.where

    @admin.display(description="policy history")
    def policy_history_shown(self, obj):
        if obj is None or obj.pk is None:
            return "—"
        versions = list(obj.policy_versions.order_by("-created_at", "-pk")[: HISTORY_SHOWN + 1])
        if not versions:
            return "No change recorded yet."
        current = agent_policy_document(obj)
        rows = []
        for index, version in enumerate(versions[:HISTORY_SHOWN]):
            document = policy_document(tool_policy=version.tool_policy, ladder=version.ladder)
            older = versions[index + 1] if index + 1 < len(versions) else None
            diff = policy_diff(
                policy_document(tool_policy=older.tool_policy, ladder=older.ladder)
                if older is not None
                else None,
                document,
                old_label="the version before",
                new_label="this version",
            )
            is_current = index == 0 and document == current
            action = (
                mark_safe("<strong>current</strong>")
                if is_current
                else format_html(
                    '<button type="submit" class="button" name="_restore" value="{}" '
                    'formaction="{}" formnovalidate>Restore this version</button>',
                    version.pk,
                    reverse("admin:runtime_agent_policy_restore", args=[obj.pk, version.pk]),
                )
            )
            rows.append(
                format_html(
                    '<li class="policy-version"><code>{}</code> {} {}'
                    "<details><summary>diff</summary><pre>{}</pre></details></li>",
                    version.version[:12],
                    version.where,
                    action,
                    diff or "(no difference)",
                )
            )
        return format_html(
            '<ol class="policy-history">{}</ol>', format_html_join("", "{}", ((r,) for r in rows))
        )

    def get_urls(self):
        urls = super().get_urls()
        return [
            path(
                "<path:object_id>/policy-restore/<int:version_id>/",
                self.admin_site.admin_view(self.policy_restore_view),
                name="runtime_agent_policy_restore",
            ),
            *urls,
        ]

    def policy_restore_view(self, request, object_id, version_id):
        """Make an earlier version of the agent's policy its policy again, in one step."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, object_id)  # another tenant's: 404, as missing
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        version = obj.policy_versions.filter(pk=version_id).first()
        if version is None:
            raise Http404("No such version.")
        change_url = reverse("admin:runtime_agent_change", args=[obj.pk])
        # Checked as a save is: the agent's tools may have changed since this version.
        problem = ladder_tools_problem(version.ladder, obj.tools)
        wrong = policy_tools_problems(
            version.tool_policy, obj.tools, discovered_tools(tenant=obj.tenant)
        )
        if problem or wrong:
            said = (
                f"ladder.tools.{problem[0]}: {problem[1]}"
                if problem
                else "; ".join(f"{'.'.join(map(str, p))}: {t}" for p, t in wrong)
            )
            self.message_user(
                request,
                f"That version does not fit the agent's tools now, so nothing changed: {said}",
                messages.ERROR,
            )
            return HttpResponseRedirect(change_url)
        done = policy_restore(agent=obj, version=version, actor=request.user.subject)
        if done is None:
            self.message_user(request, "That version is the policy already.", messages.INFO)
        else:
            self.message_user(
                request,
                f"Restored the policy version {version.version[:12]} "
                f"({version.where}); the change is in the audit log.",
                messages.SUCCESS,
            )
        return HttpResponseRedirect(change_url)

    def save_model(self, request, obj, form, change):
        previous = None
        if change:
            stored = Agent.objects.filter(pk=obj.pk).values("tool_policy", "ladder").first()
            if stored is not None:
                previous = policy_document(
                    tool_policy=stored["tool_policy"], ladder=stored["ladder"]
                )
        obj.save()
        # Inside the admin's transaction: the policy, its history and its audit row commit
        # together.
        policy_change_record(
            agent=obj,
            previous=previous,
            actor=request.user.subject,
            source=PolicyVersion.Source.ADMIN,
            via="admin",
        )
