"""Django admin's agent page: an agent's card fields, its model and tools, and its tool policy
and ladders as a table (policy_table), each checked as AGENT.md's are."""

import json
from datetime import timedelta
from typing import cast

import yaml
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from runtime.admin.agent_fields import (
    SKILL_COLUMNS,
    TOOL_COLUMNS,
    ModelField,
    RowsField,
    script_line,
)
from runtime.admin.policy_preview import policy_fields, policy_preview, preview_tools
from runtime.admin.policy_table import PolicyTableField, tool_keys
from runtime.agents.agent_models import GATE_PROVIDER, Agent, Credential, PolicyVersion
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
from runtime.decisions.replay import DraftPolicyError, policy_replay, shadow_comparison
from runtime.llm.http_agent import ModelConfigError
from runtime.llm.http_agent import validate_model as http_model_validate
from runtime.llm.openai_spec import ModelSpecError
from runtime.llm.openai_spec import validate_model as openai_model_validate
from runtime.llm.registry import PROVIDERS
from runtime.llm.scripted import ScriptError, validate_script
from runtime.policy.checks import policy_tools_problems
from runtime.tools.schema_refs import schema_problem
from tenants.admin_scope import TenantScopedAdmin

# The most characters of sample arguments a preview reads.
PREVIEW_MAX_CHARS = 20_000
# The newest versions of a policy its page lists (the audit log keeps every change).
HISTORY_SHOWN = 20


class AgentForm(forms.ModelForm):
    policy = PolicyTableField(
        label="Tool policy and ladders",
        help_text="A row per tool: what happens to its calls, who decides, and the ladder of "
        "its approvals. Checked as AGENT.md's policy and ladder are.",
    )

    skills = RowsField(
        SKILL_COLUMNS,
        "skill",
        label="Skills",
        help_text="What a caller may ask of it (its card's skills).",
    )
    model = ModelField(
        label="Model",
        help_text="Who decides its next step. A scripted model's script is YAML, as in AGENT.md.",
    )
    tools = RowsField(
        TOOL_COLUMNS,
        "tool",
        label="Tools",
        help_text="The tools it may call: a server and tool (a server alone: all its tools).",
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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        agent = self.instance
        self.fields["policy"].initial = {
            "policy": agent.tool_policy or {},
            "ladder": agent.ladder or {},
        }
        self.fields["model"].widget.providers = sorted(PROVIDERS)
        if agent.tenant_id:
            self.fields["model"].widget.credentials = list(
                Credential.objects.filter(tenant_id=agent.tenant_id)
                .order_by("name")
                .values_list("name", flat=True)
            )
        widget = self.fields["policy"].widget
        widget.offered = tool_keys(agent.tools)
        discovered = discovered_tools(tenant=agent.tenant) if agent.tenant_id else {}
        keys = [*widget.offered, *(agent.tool_policy or {})]
        widget.fields = policy_fields(keys, agent.tools, discovered)
        if agent.pk is not None:
            widget.preview_url = reverse("admin:runtime_agent_policy_preview", args=[agent.pk])
            widget.preview_tools = preview_tools(keys, discovered)

    def clean_skills(self):
        skills = self.cleaned_data["skills"]
        if not isinstance(skills, list):
            raise forms.ValidationError("A list of {id, name, description, tags, examples}.")
        field, wrong = cast(RowsField, self.fields["skills"]), []
        for index, skill in enumerate(skills):
            for key in ("id", "name", "description"):
                if not (isinstance(skill, dict) and skill.get(key)):
                    field.note(index, key, "is required")
                    wrong.append(f"skill {index + 1}: {key} is required")
        if wrong:
            raise forms.ValidationError(wrong)
        return skills

    def clean_tools(self):
        tools = self.cleaned_data["tools"]
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise forms.ValidationError("A list of {server, tool, schema, ...}.")
        field = cast(RowsField, self.fields["tools"])
        # As AGENT.md's tools: a server each, a schema a JSON Schema that refers to nothing
        # outside it.
        for i, tool in enumerate(tools):
            if not isinstance(tool.get("server"), str) or not tool["server"]:
                field.note(i, "server", "is required")
                raise forms.ValidationError(f"tool {i + 1}: server is required")
            if "schema" in tool:
                problem = schema_problem(tool["schema"])
                if problem is not None:
                    where = ".".join(map(str, [i, "schema", *problem[0]]))
                    field.note(i, "schema", f"{'.'.join(map(str, problem[0]))}: {problem[1]}")
                    raise forms.ValidationError(f"{where}: {problem[1]}")
        return tools

    def clean_model(self):
        model = self.cleaned_data["model"]
        provider = model.get("provider") if isinstance(model, dict) else None
        field = cast(ModelField, self.fields["model"])
        if provider not in PROVIDERS:
            field.note("provider", f"must be one of {', '.join(sorted(PROVIDERS))}")
            raise forms.ValidationError(
                f'An object {{"provider": ..., ...}} with a provider of {sorted(PROVIDERS)}.'
            )
        # loop.limits, kept with the model (runtime.agents.limits).
        wrong = limits_error(model.get("limits", {}))
        if wrong:
            field.note("limits", ".".join([*wrong[0], wrong[1]]))
            raise forms.ValidationError(f"limits: {'.'.join([*wrong[0], wrong[1]])}")
        # AGENT.md's memory, kept with the model too (runtime.agents.memory_budget).
        wrong = memory_error(model.get("memory", {}))
        if wrong:
            field.note("memory", ".".join([*wrong[0], wrong[1]]))
            raise forms.ValidationError(f"memory: {'.'.join([*wrong[0], wrong[1]])}")
        mapping = {k: v for k, v in model.items() if k not in ("limits", "memory")}
        try:
            # As AGENT.md's load: a gateway's keys are its schema's; a gate has a script.
            if provider in ("scripted", GATE_PROVIDER):
                validate_script(model.get("script", []))
            elif provider == "http":
                http_model_validate(mapping)
            elif provider != "gateway":
                openai_model_validate(mapping)
        except ScriptError as exc:
            line = script_line(getattr(field, "script_text", ""), exc.path)
            field.note("script", f"line {line}: {exc}" if line else str(exc))
            raise forms.ValidationError(f"script: {exc}") from None
        except ModelConfigError as exc:
            field.note(exc.field, exc.message)
            raise forms.ValidationError(f"{exc.field}: {exc.message}") from None
        except ModelSpecError as exc:
            field.note(exc.path[0] if exc.path else "", exc.message)
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
                cast(PolicyTableField, self.fields["policy"]).locate(wrong)
                self.add_error(
                    "policy", [f"{'.'.join(map(str, path))}: {text}" for path, text in wrong]
                )
            else:
                self.instance.tool_policy = document["policy"]
                self.instance.ladder = document["ladder"]
        return cleaned


class ReplayForm(forms.Form):
    """A draft tool policy to replay over an agent's recorded calls (runtime.decisions.replay)."""

    policy = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 16, "cols": 90}), max_length=200_000
    )
    days = forms.IntegerField(min_value=1, max_value=366, initial=30)

    def clean_policy(self) -> dict:
        try:
            found = yaml.safe_load(self.cleaned_data["policy"])
        except yaml.YAMLError as exc:
            raise forms.ValidationError(f"Not YAML or JSON: {exc}") from exc
        if isinstance(found, dict) and isinstance(found.get("policy"), dict):
            found = found["policy"]
        if not isinstance(found, dict):
            raise forms.ValidationError("Write the policy: a mapping of server/tool to entries.")
        return found


REPLAY_LISTED = 200


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
        "shadow_shown",
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
                    "shadow_shown",
                ]
            },
        ),
        (
            "Skills, instructions, model and tools",
            {"fields": ["skills", "default_skill", "instructions", "model", "tools"]},
        ),
        ("Source", {"fields": ["source_path", "created_at", "updated_at"]}),
    ]

    def get_urls(self):
        return [
            path(
                "<int:object_id>/replay/",
                self.admin_site.admin_view(self.replay_view),
                name="runtime_agent_replay",
            ),
            path(
                "<path:object_id>/policy-preview/",
                self.admin_site.admin_view(self.policy_preview_view),
                name="runtime_agent_policy_preview",
            ),
            path(
                "<path:object_id>/policy-restore/<int:version_id>/",
                self.admin_site.admin_view(self.policy_restore_view),
                name="runtime_agent_policy_restore",
            ),
            *super().get_urls(),
        ]

    def replay_view(self, request, object_id: int):
        """Replay a draft of the agent's tool policy over its recorded calls (nothing saved)."""
        agent = self.get_object(request, str(object_id))
        if agent is None or not self.has_view_permission(request, agent):
            raise Http404("No such agent.")
        report = None
        if request.method == "POST":
            form = ReplayForm(request.POST)
            if form.is_valid():
                now = timezone.now()
                try:
                    report = policy_replay(
                        agent=agent,
                        policy=form.cleaned_data["policy"],
                        since=now - timedelta(days=form.cleaned_data["days"]),
                        until=now,
                    )
                except DraftPolicyError as exc:
                    for problem in exc.problems:
                        form.add_error("policy", problem)
        else:
            form = ReplayForm(initial={"policy": yaml.safe_dump(agent.tool_policy or {})})
        context = {
            **self.admin_site.each_context(request),
            "title": f"Replay a draft policy: {agent.slug}",
            "opts": self.model._meta,
            "agent": agent,
            "form": form,
            "report": report,
        }
        if report is not None:
            context |= {
                "counts": [(n, report.recorded[n], report.draft[n]) for n in report.recorded],
                "held_by": sorted(report.held_by.items(), key=lambda item: -item[1]),
                "changed": report.changed[:REPLAY_LISTED],
                "more": max(0, len(report.changed) - REPLAY_LISTED),
            }
        status = 400 if request.method == "POST" and report is None else 200
        return TemplateResponse(request, "runtime/admin/agent_replay.html", context, status=status)

    @admin.display(description="shadow rules (last 30 days)")
    def shadow_shown(self, obj):
        """What the policy's ``mode: shadow`` rules would have done with the calls they
        matched, beside what happened (runtime.decisions.replay.shadow_comparison)."""
        if obj is None or obj.pk is None:
            return "—"
        report = shadow_comparison(agent=obj, since=timezone.now() - timedelta(days=30))
        replay = format_html(
            '<p><a href="{}">Replay a draft policy over the recorded calls</a></p>',
            reverse("admin:runtime_agent_replay", args=[obj.pk]),
        )
        if not report.calls:
            return format_html(
                "{}No call matched a shadow rule (write mode: shadow on a rule to try it).",
                replay,
            )
        counts = format_html_join(
            "",
            "<tr><th>{}</th><td>{}</td><td>{}</td></tr>",
            ((name, report.recorded[name], report.draft[name]) for name in report.recorded),
        )
        changed = format_html_join(
            "",
            "<li><code>{}</code> {}/{} {}: {} → {}</li>",
            (
                (c.effect_id, c.server, c.tool, f"{c.at:%Y-%m-%d %H:%M}", c.was, c.would)
                for c in report.changed[:20]
            ),
        )
        return format_html(
            '{}<table class="shadow-comparison"><tr><th></th><th>happened</th>'
            "<th>shadow rules</th></tr>{}</table><p>{} of {} calls would have gone "
            "otherwise.</p><ul>{}</ul>",
            replay,
            counts,
            len(report.changed),
            report.calls,
            changed,
        )

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

    def policy_preview_view(self, request, object_id):
        """Which rule of the draft policy on the page would hold a sample call, and who would
        be asked (runtime.admin.policy_preview): read only, nothing saved or audited."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        agent = self.get_object(request, object_id)  # another tenant's: 404, as missing
        if agent is None:
            raise Http404("No such agent.")
        if not self.has_change_permission(request, agent):
            raise PermissionDenied
        field = AgentForm(instance=agent).fields["policy"]
        problems: list[str] = []
        try:
            document = field.clean(field.widget.value_from_datadict(request.POST, None, "policy"))
        except forms.ValidationError as exc:
            problems += [f"The draft policy: {m}" for m in exc.messages]
        tool = request.POST.get("preview-tool", "").strip()
        server, _, name = tool.partition("/")
        if not (server and name) or len(tool) > 201:
            problems.append("Choose a tool (server/tool) to preview.")
        arguments = None
        text = request.POST.get("preview-arguments", "").strip() or "{}"
        try:
            arguments = json.loads(text) if len(text) <= PREVIEW_MAX_CHARS else None
        except ValueError as exc:
            problems.append(f"Sample arguments: not JSON ({exc}).")
        else:
            if not isinstance(arguments, dict):
                problems.append(
                    "Sample arguments: a JSON object such as "
                    f'{{"environment": "production"}}, at most {PREVIEW_MAX_CHARS} characters.'
                )
        preview = None
        if not problems:
            preview = policy_preview(agent=agent, document=document, tool=tool, arguments=arguments)
        context = {"preview": preview, "problems": problems, "agent": agent}
        if request.headers.get("X-Requested-With") != "fetch":
            # Without script the button posts the whole form here: a page of its own.
            context |= {
                **self.admin_site.each_context(request),
                "title": f"Preview a call: {agent.slug}",
                "opts": self.model._meta,
                "change_url": reverse("admin:runtime_agent_change", args=[agent.pk]),
            }
            template = "runtime/admin/policy_preview_page.html"
        else:
            template = "runtime/admin/policy_preview.html"
        return TemplateResponse(
            request,
            template,
            context,
            status=200 if preview is not None else 400,
        )

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
