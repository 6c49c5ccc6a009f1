"""Reading answers to interactions (interactions/v1): pure parsing and checks, no
writes. A caller answers in a message (in band); an operator or a program answers directly.
What an answer closes an interaction with is an ``Answer``."""

from dataclasses import dataclass
from typing import Any

from runtime.decisions.decision_models import Interaction
from runtime.decisions.question_forms import form_answer_read
from runtime.kernel import extensions as ext
from runtime.kernel.errors import InvalidParams, UnsupportedOperation
from runtime.policy.rules import PolicyRule


@dataclass(frozen=True)
class Answer:
    """What closes an interaction, or counts towards closing it
    (runtime.decisions.interaction_state): ``value`` ({approved, reason}, {value},
    {expired}), who gave it and through what (``by``; ``via``: a decision channel, or
    ``expiry``), and what its receipt and audit row say of it: the caller's ``message`` that
    carried it (in band), whether the decider ``stepped_up``, the hash of the arguments they
    were shown, whether they ``edited`` them, the kind of decider (a person, a program, the
    caller) and who the channel knew them as. ``rule``: the policy rule that holds the call
    as it is sent, as the decision read it (None: the receipt reads it); ``approvals``: an
    approval's quorum, made up with this answer, written with its close (None: as they
    stand)."""

    value: dict
    by: str
    via: str
    message: dict | None = None
    stepped_up: bool = False
    shown_hash: str | None = None
    edited: bool = False
    decider_kind: str = ""
    channel_user: str = ""
    rule: PolicyRule | None = None
    # A delegate's decision for an away member (runtime.decisions.approvers.delegation_for).
    on_behalf_of: str = ""
    approvals: list[dict] | None = None


def message_content(message: dict) -> tuple[str, list]:
    """A caller's message as its text (text parts joined) and its data parts."""
    texts = [p["text"] for p in message.get("parts", []) if "text" in p]
    data = [p["data"] for p in message.get("parts", []) if "data" in p]
    return "\n".join(texts), data


def answer_from_message(interaction: Interaction, message: dict) -> dict:
    """Read a caller's answer to ``interaction`` from a message (interactions/v1)."""
    metadata = message.get("metadata") or {}
    extension = metadata.get(ext.INTERACTIONS) if isinstance(metadata, dict) else None
    field = f"message.metadata[{ext.INTERACTIONS}]"
    if extension is not None:
        if not isinstance(extension, dict):
            raise InvalidParams(field, "must be an object {interactionId, approved | value}")
        if extension.get("interactionId") != interaction.public_id:
            if interaction.group_id:
                # The calls of a group are open together: the answer names one of them.
                raise InvalidParams(
                    f"{field}.interactionId",
                    "does not name an open interaction of this task (its group "
                    f"{interaction.group_id} waits on {interaction.public_id} first)",
                )
            raise InvalidParams(
                f"{field}.interactionId",
                f"does not name the open interaction of this task ({interaction.public_id})",
            )
        if "approved" in extension:
            raw = extension["approved"]
        elif "value" in extension:
            raw = extension["value"]
        elif interaction.kind != Interaction.Kind.APPROVAL:
            # The metadata names the question; the answer is the message's, as without
            # metadata: its first data part, else its text.
            text, data = message_content(message)
            if not data and not text.strip():
                raise InvalidParams(
                    field, "needs value, or the answer in a data or text part of the message"
                )
            raw = data[0] if data else text
        else:
            raise InvalidParams(field, "needs approved or value")
        via_extension = True
    else:
        text, data = message_content(message)
        raw = data[0] if data else text
        via_extension = False

    if interaction.kind == Interaction.Kind.APPROVAL:
        # Profile v2: an approval is expressed only through interactions/v1; text never approves.
        if not via_extension:
            raise UnsupportedOperation(
                "This task waits for an approval; text never approves. Answer with interactions/v1 "
                f"metadata {{interactionId: {interaction.public_id}, approved: true|false}}.",
                taskId=interaction.task.public_id,
                interactionId=interaction.public_id,
            )
        if not isinstance(raw, bool):
            raise InvalidParams(f"{field}.approved", "must be true or false")
        return {"approved": raw}
    if interaction.kind == Interaction.Kind.CONNECTION:
        return {"connected": connection_answer_is_yes(raw)}
    return {"value": question_answer_validate(interaction, raw)}


def text_problem(value: Any) -> str | None:
    """Why a decider's text (a reason, an answer, any text inside one) cannot be kept, or
    None. PostgreSQL's text and jsonb refuse NUL (a DataError mid-transaction) and text
    that is not valid Unicode (a lone surrogate: psycopg cannot encode it). Every channel
    reads it here, so that each refuses such text up front in its own words (a form error,
    a Slack modal's error, a 400), and the decision flow refuses it again whatever the
    channel let through."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return "must not contain NUL characters"
            if any("\ud800" <= char <= "\udfff" for char in item):
                return "must not contain lone surrogates (not valid Unicode)"
    return None


def answer_from_decider(interaction: Interaction, answer: dict) -> dict:
    """Read an operator's or a program's answer ({approved, reason} or {value})."""
    if interaction.kind == Interaction.Kind.APPROVAL:
        if not isinstance(answer.get("approved"), bool):
            raise InvalidParams("approved", "must be true or false")
        clean = {"approved": answer["approved"]}
        if answer.get("reason"):
            reason = str(answer["reason"])
            problem = text_problem(reason)
            if problem:
                raise InvalidParams("reason", problem, interactionId=interaction.public_id)
            clean["reason"] = reason[:1000]
        return clean
    if interaction.kind == Interaction.Kind.CONNECTION:
        return {"connected": connection_answer_is_yes(answer.get("value", answer))}
    return {"value": question_answer_validate(interaction, answer.get("value"))}


def connection_answer_is_yes(raw: Any) -> bool:
    # interactions/v1: {"connected": true} or true (or approved: true) connects; nothing else.
    return raw is True or (
        isinstance(raw, dict) and (raw.get("connected") is True or raw.get("approved") is True)
    )


def question_answer_validate(interaction: Interaction, value: Any) -> Any:
    form = interaction.request.get("form")
    if isinstance(form, dict):
        # A tool server's elicitation: the answer is read into MCP's ElicitResult.
        return form_answer_read(form, value, interaction_id=interaction.public_id)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise InvalidParams("message.parts", "the answer is empty")
    problem = text_problem(value)
    if problem:
        raise InvalidParams("answer", problem, interactionId=interaction.public_id)
    choices = interaction.request.get("choices") or []
    if choices and not interaction.request.get("allowCustom", False):
        if not isinstance(value, str) or value not in choices:
            raise InvalidParams(
                "answer", f"must be one of {choices}", interactionId=interaction.public_id
            )
    return value


# One answer for a group (interactions/v1): a data part of the caller's message that answers
# every open call of the task at once, {"answers": {interaction id: answer}} or
# {"all": answer}, each answer shaped as one interaction's ({"approved": true|false}).
GROUP_KEYS = ("answers", "all")


def group_answer_part(message: dict) -> tuple[int, dict] | None:
    """The data part (its index, its object) that answers a group at once, or None: an
    object whose one key is ``answers`` or ``all``."""
    for index, part in enumerate(message.get("parts") or ()):
        data = part.get("data") if isinstance(part, dict) else None
        if isinstance(data, dict) and len(data) == 1 and next(iter(data)) in GROUP_KEYS:
            return index, data
    return None


def group_answers_read(waiting: list[Interaction], message: dict) -> dict[str, dict] | None:
    """{interaction id: answer} for every interaction the task waits on (``waiting``, the
    calls of its group) as the caller's one message answers them, or None when the message
    is no group answer (runtime.turn.intake then reads it as one interaction's answer).

    Only approvals are answered so (a question's data part is its answer). Raises
    InvalidParams for any entry that is wrong (an id that names no open call, a call left
    out, an answer not {approved: true|false}): the message then decides nothing."""
    found = group_answer_part(message)
    if found is None or not waiting:
        return None
    if any(i.kind != Interaction.Kind.APPROVAL for i in waiting):
        return None
    index, data = found
    field = f"message.parts[{index}].data"
    ids = [i.public_id for i in waiting]
    if "all" in data:
        return {public_id: _group_entry(data["all"], f"{field}.all") for public_id in ids}
    answers = data["answers"]
    if not isinstance(answers, dict) or not answers:
        raise InvalidParams(
            f"{field}.answers", "must be an object {interaction id: {approved: true|false}}"
        )
    for public_id in answers:
        if public_id not in ids:
            raise InvalidParams(
                f"{field}.answers",
                f"{public_id!r} does not name an open interaction of this task "
                f"(it waits on {', '.join(ids)}); nothing was decided",
            )
    left = [public_id for public_id in ids if public_id not in answers]
    if left:
        raise InvalidParams(
            f"{field}.answers",
            f"answers every open interaction of the task or none: {', '.join(left)} "
            f"{'has' if len(left) == 1 else 'have'} no answer (or answer them all with "
            '{"all": {...}}); nothing was decided',
        )
    return {
        public_id: _group_entry(answers[public_id], f"{field}.answers[{public_id!r}]")
        for public_id in ids
    }


def _group_entry(entry: Any, field: str) -> dict:
    """One call's answer in a group answer: {"approved": true|false}, as one interaction's."""
    if not isinstance(entry, dict) or not isinstance(entry.get("approved"), bool):
        raise InvalidParams(f"{field}.approved", "must be true or false")
    unknown = sorted(set(entry) - {"approved"})
    if unknown:
        raise InvalidParams(field, f"takes approved only, not {', '.join(unknown)}")
    return {"approved": entry["approved"]}
