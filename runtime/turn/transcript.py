"""The transcript: what the model saw and did in a turn, kept on the task row. These helpers
read and append entries in memory; the runner saves them with its step."""

from collections.abc import Iterator, Set

from runtime.kernel.task_models import Task
from runtime.llm.actions import Action, ModelTurn, TurnView, action_dump, action_load
from runtime.llm.credentials import credential_value
from runtime.tools.catalog import tools_offered
from runtime.turn.claim import db_give_back
from runtime.turn.inputs import input_files
from runtime.turn.memory import memory_of

# The fields of the task row a turn's step writes besides its status (runtime.kernel.task_state):
# lease_expires_at because every step renews the lease.
TURN_FIELDS = (
    "artifacts",
    "artifact_ext",
    "transcript",
    "lease_owner",
    "lease_expires_at",
    "plan",
    "steps",
    "reply_message",
    "tokens",
    "cost_usd",
)


def action_record(task: Task, action: dict, cursor: int | None = None) -> int:
    """Append the model's action; return its step (its position in the transcript)."""
    position = len(task.transcript)
    task.transcript.append({"type": "action", "step": position, "action": action, "cursor": cursor})
    task.steps += 1
    return position


def tool_result_record(
    task: Task, step: int, *, ok: bool, result=None, error: str = "", reason: str = ""
) -> None:
    """``reason``: why a call did not run (a denial's), or the approver's note on a call that
    did; every provider shows it to the model with the result."""
    entry = {"type": "tool_result", "step": step, "ok": ok}
    if ok:
        entry["result"] = result
    else:
        entry["error"] = error
    if reason:
        entry["reason"] = reason
    task.transcript.append(entry)


def approval_reason(task: Task, effect_id: str) -> str:
    """The reason a person gave when approving the held call ``effect_id`` (its approval's id
    is the effect's), or ""."""
    answer = next(
        (
            e
            for e in reversed(task.transcript)
            if e["type"] == "answer"
            and e.get("interactionId") == effect_id
            and e.get("approved") is True
        ),
        None,
    )
    return str(answer.get("reason") or "") if answer else ""


def pending_call(task: Task) -> dict | None:
    """The last action, when it is a tool call still waiting for its result; of the calls of
    one reply journalled together (runtime.turn.groups: their entries name the ``group``),
    the first still waiting, so that they are sent in the reply's order."""
    actions = [e for e in task.transcript if e["type"] == "action"]
    if not actions:
        return None
    group = actions[-1].get("group")
    if group is not None:
        done = {e["step"] for e in task.transcript if e["type"] == "tool_result"}
        return next(
            (
                e
                for e in actions
                if e.get("group") == group
                and e["action"]["kind"] == "call"
                and e["step"] not in done
            ),
            None,
        )
    if actions[-1]["action"]["kind"] != "call":
        return None
    step = actions[-1]["step"]
    if any(e["type"] == "tool_result" and e["step"] == step for e in task.transcript):
        return None
    return actions[-1]


def model_turn_record(task: Task, turn: ModelTurn) -> None:
    """Keep a model's reply and the actions it holds, queued, to apply one step each."""
    entry = {
        "type": "model",
        "message": turn.message,
        "queue": [
            {"id": call_id, "action": action_dump(action)}
            for call_id, action in zip(turn.ids, turn.actions, strict=True)
        ],
        "applied": [],  # {id, step}: the queued actions applied so far, and their steps
    }
    if turn.usage is not None:
        entry["usage"] = {
            "model": turn.usage.model,
            "inputTokens": turn.usage.input_tokens,
            "outputTokens": turn.usage.output_tokens,
        }
    task.transcript.append(entry)


def queued_next(task: Task) -> tuple[str, Action] | None:
    """The next action of the model's last reply still to apply: (its id, the action)."""
    entry = next((e for e in reversed(task.transcript) if e["type"] == "model"), None)
    if entry is None or len(entry["applied"]) >= len(entry["queue"]):
        return None
    queued = entry["queue"][len(entry["applied"])]
    return queued["id"], action_load(queued["action"])


def queued_ahead(task: Task) -> list[tuple[str, Action]]:
    """The actions of the model's last reply after the one being applied (queued_applied
    marked it, and its entry is the next one recorded): (id, action) each, in order; [] when
    the action being applied is not one of the reply's."""
    entry = next((e for e in reversed(task.transcript) if e["type"] == "model"), None)
    if entry is None or not entry["applied"]:
        return []
    if entry["applied"][-1]["step"] != len(task.transcript):
        return []
    return [
        (queued["id"], action_load(queued["action"]))
        for queued in entry["queue"][len(entry["applied"]) :]
    ]


def queued_applied(task: Task, call_id: str) -> None:
    """Mark the next queued action applied; its action entry is the next one recorded."""
    entry = next(e for e in reversed(task.transcript) if e["type"] == "model")
    entry["applied"].append({"id": call_id, "step": len(task.transcript)})


def unusable_record(task: Task, problem: str) -> int:
    """Note that the model's latest reply (recorded next) could not be used; return how many
    of its replies in a row could not be (loop.limits.bad_replies bounds them)."""
    streak = unusable_streak(task.transcript) + 1
    task.transcript.append({"type": "unusable", "error": problem[:1000], "streak": streak})
    return streak


def unusable_streak(transcript: list[dict]) -> int:
    """How many of the model's replies in a row, up to its last, could not be used.

    An unusable reply is noted (``unusable``) just before it is recorded: a reply of several
    actions as its ``model`` entry, a single action as its ``action`` entry. Any reply
    recorded after that one was usable, which ends the streak."""
    last = next(
        (i for i in range(len(transcript) - 1, -1, -1) if transcript[i]["type"] == "unusable"),
        None,
    )
    if last is None:
        return 0
    queued = {a["step"] for e in transcript if e["type"] == "model" for a in e.get("applied", [])}
    for entry in transcript[last + 2 :]:
        if entry["type"] == "model" or (entry["type"] == "action" and entry["step"] not in queued):
            return 0
    return int(transcript[last].get("streak", 1))


class ConnectedApps(Set):
    """The apps the tenant has connected, read when a model first looks (most never do:
    a hosted model sees them only with ``loop.connections``), and then kept for the step."""

    def __init__(self, tenant) -> None:
        self.tenant = tenant
        self._apps: frozenset[str] | None = None

    def _read(self) -> frozenset[str]:
        if self._apps is None:
            from connections.selectors import connected_app_slugs

            try:
                self._apps = frozenset(connected_app_slugs(tenant=self.tenant))
            finally:
                # A hosted model looks while the turn's connection is given back
                # (claim.lease_kept): give back the one this read took, as credential_read.
                db_give_back()
        return self._apps

    def __contains__(self, app: object) -> bool:
        return app in self._read()

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def turn_view(task: Task, *, connected_apps: Set[str]) -> TurnView:
    """What the model sees of the turn."""
    first = task.transcript[0]
    tenant = task.tenant
    history, dropped = memory_of(task)
    return TurnView(
        text=first.get("text", ""),
        message_id=first.get("messageId", ""),
        data=first.get("data", []),
        skill_id=task.skill_id,
        transcript=task.transcript,
        connected_apps=connected_apps,
        files=input_files(task),
        agent=task.agent,
        task_id=task.public_id,
        plan=list(task.plan or []),
        instructions=task.agent.instructions,
        tools=tools_offered(task.agent),
        connections_enabled=task.agent.connections_enabled,
        credential=lambda name, environment=True: credential_read(
            tenant=tenant, name=name, environment=environment
        ),
        context_id=task.wire_context_id,
        turn=task.turn,
        history=history,
        history_dropped=dropped,
    )


def credential_read(*, tenant, name: str, environment: bool) -> str:
    """A provider reads its credential just before its call, with the turn's database
    connection given back (claim.lease_kept): give back the one this read took, too, or the
    thread would hold it through the whole call."""
    try:
        return credential_value(tenant=tenant, name=name, environment=environment)
    finally:
        db_give_back()
