"""The standing rules' REST bodies (/api/v1/rules, and the rule an answer's "allow similar"
made): what a rule matches, who made it, whether it still applies."""

from rest_framework import serializers

from approvals.api_serializers import ConditionSerializer, wire_time
from runtime.decisions.decision_models import StandingRule


class RuleSerializer(serializers.Serializer):
    id = serializers.CharField()
    agent = serializers.CharField()
    server = serializers.CharField()
    tool = serializers.CharField()
    caller = serializers.CharField(help_text="Only this caller's calls; empty: any caller.")
    conditions = ConditionSerializer(many=True)
    createdBy = serializers.CharField()
    createdFrom = serializers.CharField(allow_null=True)
    createdAt = serializers.DateTimeField()
    expiresAt = serializers.DateTimeField(allow_null=True)
    revokedAt = serializers.DateTimeField(allow_null=True)
    revokedBy = serializers.CharField(allow_blank=True)
    uses = serializers.IntegerField()
    active = serializers.BooleanField()
    madeUnder = serializers.CharField(
        allow_null=True,
        help_text="The rule of the tool policy it was made under: it matches only the calls "
        "that rule holds (null: made before rules recorded it).",
    )
    inapplicableReason = serializers.CharField(
        allow_null=True,
        help_text="Why it no longer allows the calls it matches (its maker may no longer "
        "approve them under the policy rule that holds them now, or that rule is gone); "
        "null while it applies.",
    )
    inapplicableSince = serializers.DateTimeField(allow_null=True)


def rule_wire(rule: StandingRule) -> dict:
    return {
        "id": rule.public_id,
        "agent": rule.agent.slug,
        "server": rule.server,
        "tool": rule.tool,
        "caller": rule.caller,
        "conditions": rule.conditions,
        "createdBy": rule.created_by,
        "createdFrom": rule.created_from.public_id if rule.created_from is not None else None,
        "createdAt": wire_time(rule.created_at),
        "expiresAt": wire_time(rule.expires_at),
        "revokedAt": wire_time(rule.revoked_at),
        "revokedBy": rule.revoked_by,
        "uses": rule.uses,
        "active": rule.is_active(),
        "madeUnder": (rule.policy_rule or {}).get("label") or None,
        "inapplicableReason": rule.inapplicable_reason or None,
        "inapplicableSince": wire_time(rule.inapplicable_since),
    }
