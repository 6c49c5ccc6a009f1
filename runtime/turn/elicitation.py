"""A tool server's question to a person during a call (MCP's elicitation).

The call is in flight on the run's session (runtime.tools.mcp_sessions) when the server
sends ``elicitation/create``; the call's outcome so far is that question (ToolAsks), and the
call stays open. In the next locked block the turn opens a question interaction (its prompt
the server's message, its detail the requested schema as the form) and the task is
INPUT_REQUIRED, so the caller can answer in band (interactions/v1) and operators on the
question's page, through the one decision flow, which reads the answer into MCP's
ElicitResult (runtime.decisions.question_forms). The run keeps the task's lease all along:
the sweep leaves the task alone, and the run an answer enqueues finds the lease taken and
stops at once, so no second run ever finds the call "sending" while it is open here.

The worker waits for the answer with no transaction open, for MCP_ELICITATION_TIMEOUT_SECONDS
at most, woken by the task's announcement (LISTEN/NOTIFY; SQLite polls), renewing the lease
itself. The answer goes to the server (``accept`` with the content, or ``decline``) and the
wait for the call's result goes on; another question repeats this. When the wait runs out,
the question expires and the server is told ``cancel``; so it is when the question expires
or the task is canceled first (then the run stops, closing its sessions). When the worker
dies meanwhile, the server's request dies with the session; the turn resumes in another
worker once the question is answered or expires, and finds the call sent and not closed:
uncertain for an operator, as any call whose outcome was lost (an idempotent tool's is sent
again).
"""

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from runtime.decisions.decision_models import Effect, Interaction
from runtime.decisions.interaction_state import interaction_expire, interaction_open
from runtime.decisions.question_forms import FormError, form_clean
from runtime.kernel.task_models import Task, TaskState, new_key
from runtime.kernel.task_state import STATUS_FIELDS
from runtime.kernel.wakeups import task_announcements_heard
from runtime.tools.protocol import ToolAsks, ToolError, ToolOutcomeLost
from runtime.turn.batch import Outbound, Step
from runtime.turn.claim import LeaseLost, db_give_back, lease_expiry, lease_seconds
from runtime.turn.transcript import TURN_FIELDS

logger = logging.getLogger(__name__)
PROMPT_MAX = 1000
CANCEL = {"action": "cancel"}
# The form of a page to open (URL mode): nothing to fill in, accepted or declined.
NO_FIELDS = {"type": "object", "properties": {}, "required": []}

Sent = Callable[[Task, Effect, tuple[str, object]], Step]


def elicitation_timeout() -> int:
    return getattr(settings, "MCP_ELICITATION_TIMEOUT_SECONDS", 300)


def call_made(make: Callable[[], object]) -> tuple[str, object]:
    """A tool call's outcome (network I/O, no transaction open): ("ok", its result), ("asks",
    the server's question while the call stays open), ("lost", why: sent, and no answer in
    time) or ("error", why)."""
    try:
        value = make()
    except ToolOutcomeLost as exc:
        return "lost", str(exc)
    except ToolError as exc:
        return "error", str(exc)
    if isinstance(value, ToolAsks):
        return "asks", value
    return "ok", value


def _answered_now(asks: ToolAsks, result: dict, effect: Effect, sent: Sent) -> Outbound:
    """Give ``result`` to the server, then wait for the call's next outcome (``sent``)."""
    return Outbound(
        call=lambda: call_made(lambda: asks.answer(result)),
        then=lambda task, outcome: sent(task, effect, outcome),
    )


def _question(effect: Effect, asks: ToolAsks) -> tuple[dict, dict] | None:
    """The question's (detail, form) for the server's request; None when it cannot be shown."""
    where = {"server": effect.server, "tool": effect.tool}
    if asks.mode == "url":
        parts = urlsplit(asks.url)
        bad = "\x00" in asks.url or len(asks.url) > 2000
        if parts.scheme not in ("http", "https") or not parts.netloc or bad:
            return None
        return {**where, "elicitation": "url", "url": asks.url}, NO_FIELDS
    if asks.mode != "form":
        return None
    try:
        form = form_clean(asks.schema)
    except FormError as exc:
        logger.warning("%s / %s asked for a form that cannot be shown: %s", *where.values(), exc)
        return None
    return {**where, "elicitation": "form", "form": form}, form


def elicitation_ask(task: Task, effect: Effect, asks: ToolAsks, *, sent: Sent) -> Step:
    """The server asks a person something while the call is open (in the run's locked block):
    open the question, keep the lease, and wait for the answer with no transaction open."""
    question = _question(effect, asks)
    if question is None:
        # Nobody can be asked what cannot be shown (a schema outside MCP's subset, a URL
        # that is not http(s)): the server hears "cancel", and the call goes on.
        return _answered_now(asks, CANCEL, effect, sent)
    detail, form = question
    worker_id = task.lease_owner
    prompt = " ".join(asks.message.replace("\x00", "").split())[:PROMPT_MAX] or (
        f"{effect.server} / {effect.tool} asks for your input."
    )
    seconds = elicitation_timeout()
    interaction = interaction_open(
        task=task,
        kind=Interaction.Kind.QUESTION,
        public_id=new_key("q_", 12),
        prompt=prompt,
        detail=detail,
        request={
            "step": effect.step,
            "effectId": effect.public_id,
            "elicitation": detail["elicitation"],
            "form": form,
        },
        state=TaskState.INPUT_REQUIRED,
        also=TURN_FIELDS,
        # The call waits for the answer this long at most (then the question expires).
        expires_by=timezone.now() + timedelta(seconds=seconds),
    )
    # interaction_open freed the lease, as for any pause; this one keeps it: the call is
    # still open in this run (the batch renews it as it commits).
    task.lease_owner, task.lease_expires_at = worker_id, lease_expiry()
    deadline = time.monotonic() + seconds
    logger.info("%s / %s asks a question: %s", effect.server, effect.tool, interaction.public_id)
    return Outbound(
        call=lambda: elicitation_wait(
            task_pk=task.pk, worker_id=worker_id, interaction_pk=interaction.pk, deadline=deadline
        ),
        then=lambda task, _: elicitation_answered(task, effect, asks, interaction.pk, sent=sent),
        keeps_lease=True,  # renewed by the wait itself
    )


def elicitation_wait(*, task_pk: int, worker_id: str, interaction_pk: int, deadline: float):
    """Wait (no transaction open) until the question is closed, or expire it at ``deadline``
    (monotonic); renew the turn's lease meanwhile (LeaseLost once it is not this run's: the
    task was canceled). Woken by the task's announcement, which every answer makes."""
    with task_announcements_heard() as heard:
        while True:
            state = (
                Interaction.objects.filter(pk=interaction_pk)
                .values_list("state", flat=True)
                .first()
            )
            if state != Interaction.State.OPEN:
                db_give_back()
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                interaction_expire(pk=interaction_pk, due=False)  # unless an answer won the race
                db_give_back()
                return
            # The task is INPUT_REQUIRED (or WORKING, answered a moment ago): either way still
            # this run's while it holds the lease.
            renewed = Task.objects.filter(pk=task_pk, lease_owner=worker_id).update(
                lease_expires_at=lease_expiry()
            )
            db_give_back()
            if renewed != 1:
                raise LeaseLost()
            heard(task_pk, min(remaining, max(1.0, lease_seconds() / 3)))


def elicitation_answered(
    task: Task, effect: Effect, asks: ToolAsks, interaction_pk: int, *, sent: Sent
) -> Step:
    """The question closed (in the next locked block): the answer goes to the server."""
    # The answer (or the expiry) wrote the task while this run waited (its status, history
    # and the transcript's answer entry): the run's copy takes them, under the lock.
    task.refresh_from_db(fields=[*STATUS_FIELDS, "transcript"])
    interaction = Interaction.objects.only("state", "answer", "request").get(pk=interaction_pk)
    return _answered_now(asks, elicit_result(interaction), effect, sent)


def elicit_result(interaction: Interaction) -> dict:
    """What the server is told (MCP's ElicitResult): the answer as the decision flow read it
    (runtime.decisions.question_forms), or ``cancel`` for a question that expired or was
    canceled."""
    if interaction.state == Interaction.State.ANSWERED:
        value = (interaction.answer or {}).get("value")
        if isinstance(value, dict) and value.get("action") in ("accept", "decline", "cancel"):
            if interaction.request.get("elicitation") == "url":
                return {"action": value["action"]}  # a page opened: no content (MCP)
            return value
    return dict(CANCEL)
