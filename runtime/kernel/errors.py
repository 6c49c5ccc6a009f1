"""Domain errors of the core; the A2A view maps each to one JSON-RPC error, in one place."""


class RuntimeFault(Exception):
    reason = "INTERNAL"

    def __init__(self, message: str, **metadata: object):  # each value kept as text
        super().__init__(message)
        self.message = message
        self.metadata = {k: str(v) for k, v in metadata.items()}


class TaskNotFound(RuntimeFault):
    reason = "TASK_NOT_FOUND"


class TaskNotCancelable(RuntimeFault):
    reason = "TASK_NOT_CANCELABLE"


class UnsupportedOperation(RuntimeFault):
    reason = "UNSUPPORTED_OPERATION"

    def __init__(self, message: str, reason: str = "UNSUPPORTED_OPERATION", **metadata: object):
        super().__init__(message, **metadata)
        self.reason = reason


class InvalidParams(RuntimeFault):
    reason = "INVALID_PARAMS"

    def __init__(self, field: str, description: str, **metadata: str):
        super().__init__(f"{field}: {description}", **metadata)
        self.field = field
        self.description = description


class AlreadyDecided(RuntimeFault):
    """Another decider won the race for this interaction."""

    reason = "INTERACTION_ALREADY_DECIDED"

    def __init__(self, interaction):
        from runtime.kernel.shapes import decider_public

        at = interaction.answered_at.isoformat() if interaction.answered_at else ""
        # A partner reads this (in-band answers, -32004): the decider's kind (operator, caller,
        # rule, system:expiry), never an operator's e-mail. The REST channel and the pages say
        # who, from the interaction itself (``self.interaction``).
        by = decider_public(interaction.answered_by, interaction.answered_via)
        super().__init__(
            f"Interaction {interaction.public_id} was already {interaction.state} by {by}"
            + (f" at {at}" if at else "")
            + "; this answer was not applied.",
            interactionId=interaction.public_id,
            taskId=interaction.task.public_id,
            state=interaction.state,
            decidedBy=by,
            decidedVia=interaction.answered_via,
            decidedAt=at,
        )
        self.interaction = interaction


class ItemChanged(RuntimeFault):
    """The decider was shown an earlier opening of the item (a Slack button, an e-mail's
    link): its approval was voided since, and it opened again to be decided as it stands
    now. Nothing shown for the earlier opening binds the new one."""

    reason = "INTERACTION_CHANGED"

    def __init__(self, interaction):
        why = (interaction.detail or {}).get("reason") or "its tool policy changed"
        super().__init__(
            f"the item changed since it was shown to you: the approval given before is void "
            f"({why}) and it needs a new decision, on what it is now.",
            interactionId=interaction.public_id,
        )
        self.interaction = interaction


class NotAllowed(RuntimeFault):
    reason = "NOT_ALLOWED"


class StepUpRequired(RuntimeFault):
    """A ``risk: high`` call's approval needs a decider who re-authenticated recently (or, over
    REST, a token made with the step-up right): the decision was not taken."""

    reason = "STEP_UP_REQUIRED"


class DeciderRefused(RuntimeFault):
    """The person or program may not decide this interaction (approvers, two-person rule)."""

    reason = "DECIDER_NOT_ALLOWED"


class DecisionMisfit(InvalidParams):
    """A decision that does not fit its interaction's kind (an approval takes ``approved``, not
    ``value``): the same refusal, with the same words, on every channel
    (runtime.decisions.flow), before the interaction's state is looked at. ``field`` is ""
    when the decision as a whole is at fault."""

    def __init__(self, field: str, description: str, **metadata: str):
        super().__init__(field, description, **metadata)
        if not field:
            self.message = description


class ChannelRefused(RuntimeFault):
    """This decision is not taken on this channel, though another may take it: bulk triage
    leaves out what must be decided on its own page (``bulk: false``, two people)."""

    reason = "CHANNEL_NOT_ALLOWED"


class RuleRefused(RuntimeFault):
    """The standing rule asked for with an approval cannot be made, so nothing was approved
    (the rule is checked first): ``cause`` is the core's fault that says why."""

    def __init__(self, cause: RuntimeFault):
        super().__init__(cause.message, **cause.metadata)
        self.cause = cause
        self.reason = cause.reason
