"""A decision page's forms: what the page offers (runtime.decisions.facts says which), a POST
read into the decision flow's Decision, and the flow's refusals put on the form they concern.

The button pressed names the decision: ``approve``, ``deny``, ``approve_edited`` (edit then
approve) and ``approve_rule`` (approve and allow similar calls) for an approval, ``answer``
for a question (and ``decline`` for a tool server's form), ``decline`` for a connection
request.
"""

from collections.abc import Callable

from approvals.elicitation_form import ElicitationForm, elicitation_of
from approvals.forms import AllowSimilarForm, AnswerForm, ApprovalForm, ArgumentsForm
from runtime.decisions.decision_models import Interaction
from runtime.decisions.facts import DecisionFacts
from runtime.decisions.flow import AllowSimilar, Decided, Decision
from runtime.kernel.errors import InvalidParams, RuleRefused
from runtime.policy.conditions import conditions_text

APPROVAL_CHOICES = ("approve", "deny", "approve_edited", "approve_rule")


def edit_form(facts: DecisionFacts, data=None) -> ArgumentsForm | None:
    """The held call's arguments to edit before approving, when its policy lets them be."""
    if not facts.editable or facts.held_call is None:  # editable: there is a held call
        return None
    return ArgumentsForm(data, schema=facts.schema, current=facts.held_call.arguments)


def rule_form(facts: DecisionFacts, *, is_admin: bool, data=None) -> AllowSimilarForm | None:
    """ "Approve and allow similar calls", when a rule may come from this approval."""
    if facts.held_call is None or facts.rule_refusal:
        return None
    return AllowSimilarForm(
        data,
        schema=facts.schema,
        arguments=facts.held_call.arguments or {},
        is_admin=is_admin,
        prefix="rule",
    )


class DecisionPost:
    """A decision page's POST: the forms its button names, bound, and the Decision they make
    (``decision`` is None when they do not read; ``problem`` then says why, unless a form
    does)."""

    def __init__(
        self,
        data,
        *,
        interaction: Interaction,
        facts: Callable[[], DecisionFacts],
        is_admin: bool,
    ):
        # What the page showed (``facts``), read only for the forms that need it (an edit, a
        # rule): a plain approval or denial asks nothing of the policy before the decision
        # flow reads it, under the task's lock.
        self.interaction, self.facts = interaction, facts
        self.choice = data.get("decision", "")
        self.forms: dict = {}
        self.problem = ""
        self.decision: Decision | None = None
        kind = interaction.kind
        if kind == Interaction.Kind.APPROVAL and self.choice in APPROVAL_CHOICES:
            self._approval(data, is_admin=is_admin)
        elif elicitation_of(interaction) and self.choice in ("answer", "decline"):
            self._elicitation(data)
        elif kind == Interaction.Kind.QUESTION and self.choice == "answer":
            form = self.forms["answer"] = AnswerForm(data, interaction=interaction)
            if form.is_valid():
                self.decision = Decision(value=form.cleaned_data["value"])
        elif kind == Interaction.Kind.CONNECTION and self.choice == "decline":
            self.decision = Decision(value=False)
        else:
            self.problem = "That is not a decision this interaction takes."

    def _elicitation(self, data) -> None:
        """A tool server's form (MCP elicitation): sent with its fields, or declined."""
        if self.choice == "decline":
            self.decision = Decision(value={"action": "decline"})
            return
        form = self.forms["answer"] = ElicitationForm(data, interaction=self.interaction)
        if form.is_valid():
            content = form.cleaned_data["content"]
            self.decision = Decision(value={"action": "accept", "content": content})

    def _approval(self, data, *, is_admin: bool) -> None:
        arguments = allow = None
        approval = self.forms["approval"] = ApprovalForm(data)
        if self.choice == "approve_edited":
            edit = edit_form(self.facts(), data)
            if edit is None:
                self.problem = "This tool's arguments cannot be edited."
                return
            self.forms["edit"] = edit
            arguments = edit.cleaned_data["arguments"] if edit.is_valid() else None
        if self.choice == "approve_rule":
            rule = rule_form(self.facts(), is_admin=is_admin, data=data)
            if rule is None:
                self.problem = "Calls of this tool cannot be allowed by a rule."
                return
            self.forms["rule"] = rule
            if rule.is_valid():
                allow = AllowSimilar(
                    duration=rule.cleaned_data["duration"],
                    caller_only=rule.cleaned_data["caller_only"],
                    conditions=rule.cleaned_data["conditions"],
                )
        if not all(form.is_valid() for form in self.forms.values()):
            return
        self.decision = Decision(
            approved=self.choice != "deny",
            reason=approval.cleaned_data["reason"].strip(),
            arguments=arguments,
            # The SHA-256 of the arguments the page showed: the decision binds exactly those.
            shown_hash=data.get("shown_hash", "")[:64] or None,
            allow_similar=allow,
        )

    def refused(self, exc: InvalidParams | RuleRefused) -> bool:
        """Put the flow's refusal of this decision on the form it concerns; False when no
        form does (the page says it as a message)."""
        if isinstance(exc, RuleRefused):
            form = self.forms.get("rule")
            text = exc.message
        elif exc.field == "arguments" and "edit" in self.forms:
            form, text = self.forms["edit"], exc.description
        else:
            form = self.forms.get("approval") or self.forms.get("answer")
            text = exc.description
        if form is None:
            return False
        form.add_error(None, text)
        return True


def decided_text(decided: Decided, decision: Decision) -> str:
    """What the person is told once the flow took their decision."""
    interaction = decided.interaction
    if decided.recorded:
        return (
            f"Your approval is recorded ({len(interaction.approvals or ())} of "
            f"{interaction.approvals_required}): another person must approve before the "
            "call is sent."
        )
    if interaction.kind == Interaction.Kind.QUESTION:
        value = (interaction.answer or {}).get("value")
        if elicitation_of(interaction) and isinstance(value, dict):
            if value.get("action") == "decline":
                return "Declined: the tool server is told so."
            return "Sent to the tool server."
        return "Answered."
    if interaction.kind == Interaction.Kind.CONNECTION:
        return "Declined: the agent goes on without the connection."
    if decided.rule is not None:
        return (
            f"Approved, and similar calls are allowed by rule {decided.rule.public_id} "
            f"({conditions_text(decided.rule.conditions)})."
        )
    if (interaction.answer or {}).get("edited"):
        return "Approved with the edited arguments."
    return "Approved." if decision.approved else "Denied."
