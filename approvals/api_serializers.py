"""The REST channel's wire: the bodies of /api/v1/ (read and written), and the request body
of an answer read into the decision flow's Decision (approvals/api.py serves them)."""

from datetime import datetime

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from approvals.api_summary import ModelSummaryField
from approvals.forms import (
    ANSWER_MAX,
    ARGUMENTS_MAX,
    JSON_MAX_DEPTH,
    JSON_TEXT_PROBLEMS,
    REASON_MAX,
    json_text_problem,
)
from runtime.decisions.approvers import effective_approvers
from runtime.decisions.decision_models import Interaction
from runtime.decisions.decision_selectors import held_call_of
from runtime.decisions.facts import approval_progress
from runtime.decisions.flow import AllowSimilar, Decision
from runtime.decisions.standing_rules import DURATIONS, FOREVER
from runtime.decisions.summaries import held_call_view
from runtime.policy.conditions import OPS


def wire_time(value: datetime | None) -> str | None:
    """A time as DRF's DateTimeField writes it: ISO 8601 in the current zone, UTC as "Z"."""
    if value is None:
        return None
    text = timezone.localtime(value).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


class HeldCallSummarySerializer(serializers.Serializer):
    """A held call as every list shows it (runtime.decisions.summaries.held_call_view)."""

    server = serializers.CharField()
    tool = serializers.CharField()
    arguments = serializers.JSONField(
        help_text='The call\'s arguments; the fields its policy redacts are "•••".'
    )
    summary = serializers.CharField(
        help_text="One line: the policy's title over the arguments, else key=value pairs."
    )
    impact = serializers.CharField(
        allow_blank=True,
        help_text="What approving the call does, in words: the policy rule's impact over "
        'the arguments ("" when the rule has none).',
    )


class HeldCallSerializer(HeldCallSummarySerializer):
    argumentsHash = serializers.CharField(  # noqa: N815 - the wire's spelling
        help_text="SHA-256 of the canonical arguments, redacted ones included (the receipt's)."
    )
    state = serializers.CharField(help_text="The effect's state: held, approved, sent, ...")


class InteractionSerializer(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    kind = serializers.ChoiceField(choices=Interaction.Kind.choices)
    state = serializers.ChoiceField(choices=Interaction.State.choices)
    prompt = serializers.CharField()
    detail = serializers.JSONField()
    choices = serializers.SerializerMethodField()
    allowCustom = serializers.SerializerMethodField()
    agent = serializers.CharField(source="task.agent.slug")
    taskId = serializers.CharField(source="task.public_id")
    contextId = serializers.CharField(source="task.wire_context_id")
    subject = serializers.CharField(help_text="The caller the task runs for.")
    deciders = serializers.ChoiceField(choices=Interaction.Deciders.choices)
    approvers = serializers.SerializerMethodField(
        help_text="Who may decide an approval now: roles, group:<slug>, caller (empty for "
        "other kinds: any operator)."
    )
    approvalsRequired = serializers.IntegerField(
        source="approvals_required",
        help_text="How many distinct people must approve, in all its stages (2: the "
        "two-person rule).",
    )
    approvals = serializers.ListField(
        child=serializers.DictField(),
        help_text="The approvals recorded so far, [{by, via, at, binds, stage}], when more than "
        "one is required.",
    )
    createdAt = serializers.DateTimeField(source="created_at")
    expiresAt = serializers.DateTimeField(source="expires_at")
    # Any JSON value, null (not answered yet) included: with allow_null the 3.1 schema said
    # "null, or any value", which null matches twice and so, under oneOf, fails.
    answer = serializers.JSONField(
        help_text="The decision or answer taken (null while open): {approved, reason} for an "
        "approval, the value for a question or a connection."
    )
    answeredBy = serializers.CharField(source="answered_by", allow_blank=True)
    answeredVia = serializers.CharField(source="answered_via", allow_blank=True)
    answeredAt = serializers.DateTimeField(source="answered_at", allow_null=True)
    heldCall = serializers.SerializerMethodField(
        help_text='For an approval: the call it holds, its redacted fields as "•••".'
    )
    groupId = serializers.CharField(  # noqa: N815 - the wire's spelling
        allow_null=True,
        help_text="The approval group of the calls of one model reply it belongs to (decide "
        "it at /api/v1/groups/<groupId>), or null.",
    )
    summary = ModelSummaryField(
        required=False,
        help_text="For an approval whose tenant has AI summaries on, once a model wrote one: "
        "its summary of the held call, labelled as a model's and checked against the "
        "arguments. Absent otherwise.",
    )

    def get_choices(self, obj) -> list[str]:
        return [str(c) for c in (obj.request or {}).get("choices") or []]

    def to_representation(self, instance) -> dict:
        # The same object the fields above describe (the schema reads them), built directly:
        # a page of 200 rows through DRF's per-field machinery costs more than its query.
        agent_slug, task_id, context_id = self.task_columns(instance)
        return {
            "id": instance.public_id,
            "kind": instance.kind,
            "state": instance.state,
            "prompt": instance.prompt,
            "detail": instance.detail,
            "choices": self.get_choices(instance),
            "allowCustom": self.get_allowCustom(instance),
            "agent": agent_slug,
            "taskId": task_id,
            "contextId": context_id,
            "subject": instance.subject,
            "deciders": instance.deciders,
            "approvers": self.get_approvers(instance),
            "approvalsRequired": instance.approvals_required,
            "approvals": instance.approvals or [],
            "createdAt": wire_time(instance.created_at),
            "expiresAt": wire_time(instance.expires_at),
            "answer": instance.answer,
            "answeredBy": instance.answered_by,
            "answeredVia": instance.answered_via,
            "answeredAt": wire_time(instance.answered_at),
            "heldCall": held_call_view(instance),
            "groupId": instance.group_id or None,
            **self.model_summary(instance),
        }

    def task_columns(self, instance) -> tuple[str, str, str]:
        """(agent slug, task id, context id) of the interaction's task."""
        task = instance.task
        return task.agent.slug, task.public_id, task.wire_context_id

    def model_summary(self, instance) -> dict:
        # The view reads the page's summaries in one query (approvals.api): none per row.
        found = (self.context.get("summaries") or {}).get(instance.pk)
        return {"summary": found.wire()} if found is not None else {}

    @extend_schema_field(HeldCallSummarySerializer(allow_null=True))
    def get_heldCall(self, obj) -> dict | None:  # noqa: N802 - the wire's spelling
        return held_call_view(obj)

    def get_approvers(self, obj) -> list[str]:
        return effective_approvers(obj) if obj.kind == Interaction.Kind.APPROVAL else []

    def get_allowCustom(self, obj) -> bool:  # noqa: N802 - the wire's spelling
        request = obj.request or {}
        return bool(request.get("allowCustom")) or not request.get("choices")


class InteractionRowSerializer(InteractionSerializer):
    """A row of the list: InteractionSerializer over interactions read by
    interactions_for_tenant, whose task's columns came with them (no Task per row)."""

    def task_columns(self, instance) -> tuple[str, str, str]:
        return instance.agent_slug, instance.task_public_id, instance.task_context_id


class PolicyRuleSerializer(serializers.Serializer):
    entry = serializers.CharField(help_text='The key: "server/tool" or "server" ("": none).')
    rule = serializers.IntegerField(
        allow_null=True, help_text="The rule's number in a conditional entry, from 1."
    )
    title = serializers.CharField(allow_blank=True)
    when = serializers.ListField(child=serializers.DictField(), help_text="Its conditions.")
    # The wire's names for fields that a Field has as attributes too: DRF's metaclass takes
    # declared fields off the class, so they do not clash (the type checker does not know it).
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="policy, annotations (the tenant's default) or default."
    )
    version = serializers.CharField(help_text="SHA-256 of the rule as written: what receipts bind.")
    label = serializers.CharField(  # type: ignore[assignment]
        help_text="Which rule held the call, in words."
    )


class StageSerializer(serializers.Serializer):
    stage = serializers.IntegerField()
    title = serializers.CharField(allow_blank=True)
    approvers = serializers.ListField(child=serializers.CharField())
    required = serializers.IntegerField()  # type: ignore[assignment]  # as in PolicyRuleSerializer
    approved = serializers.IntegerField(help_text="Approvals counted in this stage so far.")


class InteractionDetailSerializer(InteractionSerializer):
    """One interaction: for an approval, the call it holds, and who may decide it and how many
    people must approve as its policy stands now (runtime.decisions.approvers.approval_needs:
    never less than when it opened)."""

    heldCall = serializers.SerializerMethodField(
        help_text="For an approval: the call it holds, with the arguments that will be sent "
        '(redacted fields as "•••") and their hash.'
    )
    heldBy = serializers.SerializerMethodField(
        help_text="For an approval: the entry (and rule) of the tool policy that held the call; "
        "while it is open, the one that holds it now (its version is what an approval binds)."
    )
    openedUnder = serializers.SerializerMethodField(  # noqa: N815 - the wire's spelling
        help_text="An open approval whose policy rule changed since it opened (approvals given "
        "before no longer count): the rule it opened under; else null."
    )
    progress = serializers.SerializerMethodField(
        help_text='"2 of 3": the approvals that count, of the number required.'
    )
    stage = serializers.SerializerMethodField(
        help_text="An open approval in stages: the stage being decided, from 1."
    )
    stages = serializers.SerializerMethodField(
        help_text="An open approval in stages: each, in order, with its approvals so far."
    )

    @extend_schema_field(HeldCallSerializer(allow_null=True))
    def get_heldCall(self, obj) -> dict | None:  # noqa: N802 - the wire's spelling
        effect = held_call_of(obj)
        if effect is None:
            return None
        view = held_call_view(obj, arguments=effect.arguments)
        if view is None:
            return None
        return {**view, "argumentsHash": effect.arguments_hash, "state": effect.state}

    @extend_schema_field(PolicyRuleSerializer(allow_null=True))
    def get_heldBy(self, obj) -> dict | None:  # noqa: N802 - the wire's spelling
        return approval_extras(obj)["heldBy"]

    @extend_schema_field(PolicyRuleSerializer(allow_null=True))
    def get_openedUnder(self, obj) -> dict | None:  # noqa: N802 - the wire's spelling
        return approval_extras(obj)["openedUnder"]

    def get_progress(self, obj) -> str | None:
        return approval_extras(obj)["progress"]

    def get_stage(self, obj) -> int | None:
        return approval_extras(obj)["stage"]

    @extend_schema_field(StageSerializer(many=True))
    def get_stages(self, obj) -> list[dict]:
        return approval_extras(obj)["stages"]

    def to_representation(self, instance) -> dict:
        body = {**super().to_representation(instance), "heldCall": self.get_heldCall(instance)}
        extras = approval_extras(instance)
        body.update(
            (key, extras[key]) for key in ("heldBy", "openedUnder", "progress", "stage", "stages")
        )
        if "needs" in extras:
            needs = extras["needs"]
            body["approvers"] = list(needs.approvers)
            body["approvalsRequired"] = needs.required
        return body


def approval_extras(interaction) -> dict:
    """runtime.decisions.facts.approval_progress, read once per interaction: kept for the one
    serialisation that reads it field by field (DRF's schema path)."""
    key = (interaction.state, len(interaction.approvals or ()))
    cached = interaction.__dict__.get("_countersign_extras")
    if cached is not None and cached[0] == key:
        return cached[1]
    extras = approval_progress(interaction)
    interaction.__dict__["_countersign_extras"] = (key, extras)
    return extras


class DecisionFactsSerializer(serializers.Serializer):
    """What the credentials of the request may decide, and what their decision would do
    (runtime.decisions.facts, as the decision page shows it)."""

    mayDecide = serializers.BooleanField()
    refusal = serializers.CharField(allow_null=True, help_text="Why you may not decide it.")
    mayApprove = serializers.BooleanField()
    approveRefusal = serializers.CharField(
        allow_null=True, help_text="Why you may deny but not approve it."
    )
    stepUpRequired = serializers.BooleanField(
        help_text="Approving needs a step-up you have not made (risk: high)."
    )
    riskHigh = serializers.BooleanField()
    editable = serializers.BooleanField(help_text="An approval may send edited arguments.")
    approvedAlready = serializers.BooleanField(
        help_text="You approved it; another person must approve (two-person rule)."
    )
    allowSimilar = serializers.BooleanField(help_text="An approval may make a standing rule.")
    allowSimilarRefusal = serializers.CharField(allow_null=True)
    next = serializers.CharField(help_text="What your decision does, in words.")


def facts_wire(facts) -> dict:
    return {
        "mayDecide": facts.may_decide,
        "refusal": facts.refusal,
        "mayApprove": facts.may_approve and facts.interaction.kind == Interaction.Kind.APPROVAL,
        "approveRefusal": facts.approve_refusal,
        "stepUpRequired": facts.step_up_needed,
        "riskHigh": facts.high_risk,
        "editable": facts.editable,
        "approvedAlready": facts.approved_already,
        "allowSimilar": facts.may_make_rule,
        "allowSimilarRefusal": facts.rule_refusal or None,
        "next": facts.next_step,
    }


class InteractionFactsSerializer(InteractionDetailSerializer):
    """The detail, and what the request's decider may decide (``context["facts"]``)."""

    decision = serializers.SerializerMethodField()

    @extend_schema_field(DecisionFactsSerializer)
    def get_decision(self, obj) -> dict:
        return facts_wire(self.context["facts"])

    def to_representation(self, instance) -> dict:
        return {**super().to_representation(instance), "decision": self.get_decision(instance)}


class JSONBooleanField(serializers.BooleanField):
    """A JSON true or false: "yes", "on", 1 and "true" are not decisions."""

    default_error_messages = {
        "invalid": "Must be a JSON boolean, true or false.",
        "null": "Must be a JSON boolean, true or false.",
    }

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class AnswerValueField(serializers.JSONField):
    """Any JSON, holding only text PostgreSQL can store, in strings as long as the page's."""

    default_error_messages = {**JSON_TEXT_PROBLEMS}

    def to_internal_value(self, data):
        problem = json_text_problem(data, max_length=ANSWER_MAX)
        if problem:
            self.fail(problem, max_length=ANSWER_MAX, max_depth=JSON_MAX_DEPTH)
        return super().to_internal_value(data)


class ArgumentsField(serializers.JSONField):
    """Edited arguments: a JSON object holding only text PostgreSQL can store."""

    default_error_messages = {**JSON_TEXT_PROBLEMS, "not_object": "Must be a JSON object."}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            self.fail("not_object")
        problem = json_text_problem(data, max_length=ARGUMENTS_MAX)
        if problem:
            self.fail(problem, max_length=ARGUMENTS_MAX, max_depth=JSON_MAX_DEPTH)
        return super().to_internal_value(data)


class ConditionSerializer(serializers.Serializer):
    field = serializers.CharField(
        max_length=200, help_text="A field's path: names joined by dots (target.region)."
    )
    op = serializers.ChoiceField(choices=[(op, op) for op in OPS])
    value = AnswerValueField(
        help_text="equals: a value (objects and lists compared whole); in: a list of values; "
        "prefix: text; lt, lte, gt, gte: a number."
    )


class AllowSimilarSerializer(serializers.Serializer):
    """ "Approve and allow similar calls" over REST (docs/how-to/policy.md "Standing rules")."""

    duration = serializers.ChoiceField(
        choices=[*DURATIONS, FOREVER], default="1d", help_text="forever: admins only"
    )
    callerOnly = serializers.BooleanField(default=True)
    conditions = ConditionSerializer(many=True, default=list)


class AnswerSerializer(serializers.Serializer):
    """The body of an answer, read without the interaction: which fields its kind takes is
    the decision flow's to check (runtime.decisions.flow.decision_fit_check), as for every
    channel."""

    approved = JSONBooleanField(
        required=False, help_text="For an approval: true sends the held call; false denies it."
    )
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=REASON_MAX,
        help_text="For an approval: why; the agent's model sees it.",
    )
    allowSimilar = AllowSimilarSerializer(
        required=False,
        help_text="With approved: true, also make a standing rule for similar calls.",
    )
    value = AnswerValueField(
        required=False,
        help_text="For a question: the answer (one of its choices unless allowCustom). "
        "For a connection: true or false.",
    )
    arguments = ArgumentsField(
        required=False,
        help_text="For an approval of a tool whose policy says editable: true: the arguments "
        "to send instead (a JSON object, checked against the tool's schema).",
    )
    argumentsHash = serializers.RegexField(  # noqa: N815 - the wire's spelling
        r"^[0-9a-f]{64}$",
        required=False,
        help_text="The SHA-256 of the arguments you were shown (heldCall.argumentsHash); "
        "the decision is refused if the call's arguments are no longer those.",
    )


class InteractionPageSerializer(serializers.Serializer):
    """A page of the list: follow ``next`` for older rows, ``previous`` for newer ones."""

    next = serializers.URLField(allow_null=True, help_text="The next (older) page, or null.")
    previous = serializers.URLField(
        allow_null=True, help_text="The previous (newer) page, or null."
    )
    results = InteractionSerializer(many=True)


class DecidedSerializer(serializers.Serializer):
    detail = serializers.CharField()
    state = serializers.CharField()
    answeredBy = serializers.CharField()
    answeredVia = serializers.CharField()
    answeredAt = serializers.DateTimeField(allow_null=True)


class ErrorSerializer(serializers.Serializer):
    """What approvals/api_errors.py answers for a refused request."""

    detail = serializers.CharField()
    field = serializers.CharField(required=False, help_text="The field at fault, when one is.")
    reason = serializers.CharField(
        required=False, help_text="A machine-readable reason, e.g. STEP_UP_REQUIRED."
    )
    errors = serializers.JSONField(  # type: ignore[assignment]  # as in PolicyRuleSerializer
        required=False, help_text="Every validation error, keyed by field."
    )


def answer_decision(data: dict) -> Decision:
    """A valid AnswerSerializer's data as the decision flow's Decision."""
    wanted = data.get("allowSimilar")
    return Decision(
        approved=data.get("approved"),
        value=data.get("value"),
        reason=data.get("reason", ""),
        arguments=data.get("arguments"),
        shown_hash=data.get("argumentsHash"),
        allow_similar=AllowSimilar(
            duration=wanted["duration"],
            caller_only=wanted["callerOnly"],
            conditions=[dict(condition) for condition in wanted["conditions"]],
        )
        if wanted is not None
        else None,
    )


class InteractionFilters(serializers.Serializer):
    state = serializers.ChoiceField(choices=Interaction.State.choices, required=False)
    kind = serializers.ChoiceField(choices=Interaction.Kind.choices, required=False)
    agent = serializers.SlugField(required=False, help_text="An agent's slug.")
