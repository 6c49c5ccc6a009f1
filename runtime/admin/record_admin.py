"""Django admin's read-only pages of what the core records (tasks, interactions, effects,
standing rules, the audit, receipts): they change only through the core's services, and
what a policy redacts is redacted here too."""

import io
import json
from datetime import UTC, timedelta
from typing import Any

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Count, Max, Min
from django.http import HttpResponse
from django.utils.html import format_html

from runtime.decisions.decision_models import Effect, Interaction, Receipt, StandingRule
from runtime.decisions.standing_rules import rule_revoke
from runtime.decisions.summaries import effect_call_view, redacted
from runtime.evidence.pack import evidence_pack_write
from runtime.kernel.errors import RuntimeFault
from runtime.kernel.task_models import AuditEvent, Task
from runtime.policy.title_syntax import call_terms
from tenants.admin_scope import TenantScopedAdmin
from tenants.models import Tenant


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
    list_display = ["created_at", "tenant", "actor", "action", "via", "chain_seq"]
    list_filter = ["action", "via", "tenant"]
    search_fields = ["actor"]
    list_select_related = ["tenant"]
    date_hierarchy = "created_at"
    actions = ["evidence_export"]

    @admin.action(
        description="Export an evidence pack of the selected rows' period (signed zip)",
        permissions=["view"],
    )
    def evidence_export(self, request, queryset):
        """The pack of one tenant for the whole days (UTC) from the first selected row's to the
        last's (pick the period with the dates above, then select all): runtime.evidence.pack.
        Whole days, so that a receipt written a moment before its decision's audit row is in."""
        span = queryset.aggregate(
            first=Min("created_at"), last=Max("created_at"), tenants=Count("tenant", distinct=True)
        )
        if span["tenants"] != 1:
            self.message_user(
                request, "Select the rows of one tenant (filter by tenant first).", messages.ERROR
            )
            return None
        tenant = Tenant.objects.get(pk=queryset.values_list("tenant", flat=True)[:1][0])
        midnight = {"hour": 0, "minute": 0, "second": 0, "microsecond": 0}
        since = span["first"].astimezone(UTC).replace(**midnight)
        until = span["last"].astimezone(UTC).replace(**midnight) + timedelta(days=1)
        body = io.BytesIO()
        evidence_pack_write(tenant=tenant, since=since, until=until, out=body)
        response = HttpResponse(body.getvalue(), content_type="application/zip")
        name = f"evidence-{tenant.slug}-{since:%Y%m%d}-{until:%Y%m%d}.zip"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


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
