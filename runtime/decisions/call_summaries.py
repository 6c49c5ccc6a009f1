"""AI summaries of held calls: where a tenant turns on "AI summaries of held calls", the
agent's own model writes a short summary of each call held for a person, shown labelled
"summary written by a model" beside the arguments (never in their place) and checked by
runtime.decisions.summary_check, which flags the values it names that the arguments do not
hold.

- The approval opens as always; after its transaction commits, a worker is asked for the
  summary (``summary_requested``): the model call never runs in a request and never holds
  up the item, its notifications or its decision.
- The model is given the tool, its description, the arguments with every redacted field
  taken out, and the last few messages of the task (bounded), with every redacted value
  blanked out of them; where a redacted value is too short to blank out safely, no message
  is sent at all. A redacted value never reaches the model.
- A model that cannot answer leaves the item as it is: the task is tried again a bounded
  number of times (runtime.tasks.summarise_held_call), then given up, logged and counted.
- One summary per approval (a unique row): a second run of the task finds it and asks no
  model again.
"""

import json
import logging

from django.db import IntegrityError, transaction

from config.celery import task_enqueue
from runtime.decisions.decision_models import CallSummary, Interaction
from runtime.decisions.summaries import REDACTED, redacted
from runtime.decisions.summary_check import summary_unsupported
from runtime.llm.actions import SummaryUnavailable
from runtime.llm.credentials import credential_value
from runtime.llm.summary_ask import SummaryAsk
from runtime.llm.summary_writing import summary_write
from runtime.policy.title_syntax import call_terms
from tenants.models import Tenant

logger = logging.getLogger(__name__)

# The tail of the conversation a model is given: how many messages, how long each, in all.
CONVERSATION_MESSAGES = 6
MESSAGE_CHARS = 1000
CONVERSATION_CHARS = 4000
# A redacted value shorter than this is not blanked out of the conversation (it would blank
# out ordinary words and numbers): the conversation is then not sent at all.
BLANK_MIN = 4
# How long the inbox's row shows of a summary.
ROW_CHARS = 120


def summary_requested(sender, *, interaction: Interaction, **kwargs) -> None:
    """An approval opened (runtime.kernel.signals.interaction_opened): once its transaction
    commits, ask a worker for its summary when the tenant has AI summaries on. Never fails
    or slows the turn that held the call."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return
    pk, tenant_id = interaction.pk, interaction.tenant_id

    def enqueue() -> None:
        try:
            if Tenant.objects.filter(pk=tenant_id, ai_summaries=True).exists():
                task_enqueue("runtime.tasks.summarise_held_call", (pk,))
        except Exception:  # noqa: BLE001 - a summary is never worth failing a committed turn
            logger.warning("could not ask for the summary of interaction %s", pk, exc_info=True)

    transaction.on_commit(enqueue)


def held_call_summarise(*, interaction_pk: int) -> CallSummary | None:
    """Have the agent's model write the summary of an open approval's held call, check it
    and keep it; the one kept already, or None when there is nothing to do (the tenant has
    summaries off, the item is decided, the model writes none). Raises ModelError when the
    model could not answer (the caller tries again)."""
    interaction = (
        Interaction.objects.select_related("tenant", "task__agent")
        .filter(pk=interaction_pk, kind=Interaction.Kind.APPROVAL)
        .first()
    )
    if interaction is None or not interaction.tenant.ai_summaries:
        return None
    kept = CallSummary.objects.filter(interaction_id=interaction.pk).first()
    if kept is not None or interaction.state != Interaction.State.OPEN:
        return kept
    call = (interaction.request or {}).get("call")
    if not isinstance(call, dict):
        return None
    found = call.get("arguments")
    arguments: dict = found if isinstance(found, dict) else {}
    fields = call_terms(call).get("redact", [])
    agent = interaction.task.agent
    ask = summary_ask(call=call, arguments=arguments, fields=fields, task=interaction.task)
    tenant = interaction.tenant
    try:
        text, model = summary_write(
            model=agent.model or {},
            ask=ask,
            credential=lambda name, environment=True: credential_value(
                tenant=tenant, name=name, environment=environment
            ),
        )
    except SummaryUnavailable as exc:
        logger.info("no summary of interaction %s: %s", interaction.pk, exc)
        return None
    problems = summary_unsupported(text, arguments, fields)
    try:
        with transaction.atomic():
            return CallSummary.objects.create(
                tenant_id=interaction.tenant_id,
                interaction=interaction,
                text=text,
                model=model,
                problems=problems,
            )
    except IntegrityError:
        # Another run of the task kept one first: that one stands.
        return CallSummary.objects.filter(interaction_id=interaction.pk).first()


def summary_ask(*, call: dict, arguments: dict, fields: list[str], task) -> SummaryAsk:
    """What the model is given: nothing of a redacted field (see the module)."""
    secrets = _redacted_values(arguments, fields)
    # A redacted value may be repeated in another field's text: blanked out there too.
    shown = _without_redacted(redacted(arguments, fields), secrets)
    server, tool = str(call.get("server") or ""), str(call.get("tool") or "")
    description = ""
    for entry in task.agent.tools or []:
        if isinstance(entry, dict) and entry.get("server") == server:
            if entry.get("tool") in (tool, None, ""):
                description = str(entry.get("description") or "")
                break
    conversation: tuple[tuple[str, str], ...] = ()
    if all(len(value) >= BLANK_MIN for value in secrets):
        conversation = _conversation(task, secrets)
    return SummaryAsk(
        server=server,
        tool=tool,
        description=_blanked(description, secrets)[:MESSAGE_CHARS],
        arguments=shown,
        conversation=conversation,
    )


def _without_redacted(value, secrets: list[str]):
    if isinstance(value, dict):
        return {k: _without_redacted(v, secrets) for k, v in value.items() if v != REDACTED}
    if isinstance(value, list):
        return [_without_redacted(v, secrets) for v in value]
    if isinstance(value, str):
        return _blanked(value, [s for s in secrets if len(s) >= BLANK_MIN])
    return value


def _redacted_values(arguments: dict, fields: list[str]) -> list[str]:
    """Every value (as text) under the redacted fields, longest first."""
    found: list[str] = []

    def leaves(value) -> None:
        if isinstance(value, dict):
            for item in value.values():
                leaves(item)
        elif isinstance(value, list):
            for item in value:
                leaves(item)
        elif value is not None and not isinstance(value, bool):
            found.append(str(value))
            if not isinstance(value, str):
                found.append(json.dumps(value))

    for name in fields:
        leaves(_at(arguments, name))
    return sorted({v for v in found if v}, key=len, reverse=True)


def _at(arguments, name: str):
    if isinstance(arguments, dict) and name in arguments:
        return arguments[name]
    value = arguments
    for key in name.split("."):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None
    return value


def _blanked(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def _conversation(task, secrets: list[str]) -> tuple[tuple[str, str], ...]:
    """The last messages of the task's history, as (who, text), redacted values blanked."""
    said: list[tuple[str, str]] = []
    for message in list(task.history or [])[-CONVERSATION_MESSAGES:]:
        if not isinstance(message, dict):
            continue
        texts = []
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif "data" in part:
                texts.append(json.dumps(part["data"], ensure_ascii=False, sort_keys=True))
        text = " ".join(" ".join(texts).split())
        if not text:
            continue
        who = "agent" if message.get("role") == "ROLE_AGENT" else "caller"
        said.append((who, _blanked(text, secrets)[:MESSAGE_CHARS]))
    kept: list[tuple[str, str]] = []
    total = 0
    for who, text in reversed(said):  # the newest first: they led to the call
        if total + len(text) > CONVERSATION_CHARS:
            break
        kept.append((who, text))
        total += len(text)
    return tuple(reversed(kept))


# --- reading ---------------------------------------------------------------------------------


def call_summaries_for(*, tenant, interaction_ids) -> dict[int, CallSummary]:
    """The summaries of these interactions of the tenant, by interaction id (one query;
    none while the tenant has AI summaries off: none are shown then)."""
    ids = [pk for pk in interaction_ids if pk]
    if not ids or not tenant.ai_summaries:
        return {}
    return {
        s.interaction_id: s
        for s in CallSummary.objects.filter(tenant=tenant, interaction_id__in=ids)
    }


def call_summary_of(interaction: Interaction, *, tenant) -> CallSummary | None:
    """The interaction's summary, or None (one query, unless it was read with it; none
    while ``tenant``, the interaction's, has AI summaries off)."""
    if not tenant.ai_summaries:
        return None
    try:
        return interaction.model_summary
    except CallSummary.DoesNotExist:
        return None


def call_summary_shown(interaction: Interaction) -> CallSummary | None:
    """The interaction's summary where its tenant shows them now (one query), for a
    surface that has the interaction without its tenant (a notification)."""
    return (
        CallSummary.objects.filter(interaction_id=interaction.pk, tenant__ai_summaries=True)
        .only("text", "model", "problems")
        .first()
    )


def call_summary_short(summary: CallSummary) -> str:
    """A summary as the inbox's row shows it."""
    text = summary.text
    return text if len(text) <= ROW_CHARS else text[: ROW_CHARS - 1].rstrip() + "…"
