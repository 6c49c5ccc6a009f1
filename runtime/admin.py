import json

from django import forms
from django.contrib import admin
from django.utils.html import format_html

from runtime.agentfile import DECIDERS, POLICY_ACTIONS
from runtime.llm.openai_chat import ModelSpecError, validate_model
from runtime.llm.scripted import ScriptError, validate_script
from runtime.models import Agent, AuditEvent, Effect, Interaction, Task
from runtime.turn.limits import limits_error


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = [
            "tenant",
            "slug",
            "name",
            "description",
            "version",
            "skills",
            "instructions",
            "model",
            "tools",
            "tool_policy",
            "connections_enabled",
            "public",
            "interaction_ttl_seconds",
        ]
        widgets = {
            "skills": forms.Textarea(attrs={"rows": 8, "cols": 100}),
            "model": forms.Textarea(attrs={"rows": 16, "cols": 100}),
            "tools": forms.Textarea(attrs={"rows": 10, "cols": 100}),
            "tool_policy": forms.Textarea(attrs={"rows": 4, "cols": 100}),
        }

    def clean_skills(self):
        skills = self.cleaned_data["skills"]
        if not isinstance(skills, list) or not all(
            isinstance(s, dict) and s.get("id") and s.get("name") and s.get("description")
            for s in skills
        ):
            raise forms.ValidationError("A list of {id, name, description, tags, examples}.")
        return skills

    def clean_model(self):
        model = self.cleaned_data["model"]
        provider = model.get("provider") if isinstance(model, dict) else None
        if provider not in ("scripted", "openai"):
            raise forms.ValidationError(
                'An object {"provider": "scripted", "script": [...]} or '
                '{"provider": "openai", "model": "...", ...}.'
            )
        # loop.limits, kept with the model (runtime.turn.limits).
        wrong = limits_error(model.get("limits", {}))
        if wrong:
            raise forms.ValidationError(f"limits: {'.'.join([*wrong[0], wrong[1]])}")
        try:
            if provider == "scripted":
                validate_script(model.get("script", []))
            else:
                validate_model({k: v for k, v in model.items() if k != "limits"})
        except ScriptError as exc:
            raise forms.ValidationError(f"script: {exc}") from None
        except ModelSpecError as exc:
            raise forms.ValidationError(f"model: {exc}") from None
        return model

    def clean_tool_policy(self):
        policy = self.cleaned_data["tool_policy"] or {}
        if not isinstance(policy, dict):
            raise forms.ValidationError('An object {"server/tool": "allow"|"approve"|"deny"}.')
        for key, rule in policy.items():
            action = rule.get("action") if isinstance(rule, dict) else rule
            if action not in POLICY_ACTIONS:
                raise forms.ValidationError(f"{key}: must be allow, approve or deny.")
            if isinstance(rule, dict) and rule.get("deciders", "either") not in DECIDERS:
                raise forms.ValidationError(f"{key}: deciders must be either or operators.")
        return policy


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
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
    readonly_fields = ["source_path", "created_at", "updated_at"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Runtime records change only through the runtime's services, never by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def pretty(value) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "tenant", "agent", "subject", "state", "status_timestamp"]
    list_filter = ["state", "tenant"]
    search_fields = ["public_id", "wire_context_id", "subject", "trace_id"]
    list_select_related = ["tenant", "agent"]
    exclude = ["transcript", "history", "artifacts", "status_message", "runs"]
    readonly_fields = ["transcript_pretty", "runs_pretty"]

    @admin.display(description="transcript")
    def transcript_pretty(self, obj):
        return pretty(obj.transcript)

    @admin.display(description="runs")
    def runs_pretty(self, obj):
        return pretty(obj.runs)


@admin.register(Interaction)
class InteractionAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "tenant", "kind", "state", "prompt", "answered_by", "expires_at"]
    list_filter = ["kind", "state", "tenant"]
    search_fields = ["public_id", "prompt", "answered_by"]
    list_select_related = ["tenant"]


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "tenant", "server", "tool", "state", "approved_by", "created_at"]
    list_filter = ["state", "server", "tenant"]
    search_fields = ["public_id", "server", "tool"]
    list_select_related = ["tenant"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "tenant", "actor", "action", "via"]
    list_filter = ["action", "via", "tenant"]
    search_fields = ["actor"]
    list_select_related = ["tenant"]
