"""The model interface the turn loop talks to: the actions a model may take, what it sees of
a turn, and the protocol a provider implements (runtime.llm.registry names the providers)."""

import dataclasses
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Reply:
    """Finish the turn with this text; ``direct`` answers with a Message instead of a task."""

    text: str
    direct: bool = False
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class Ask:
    question_id: str
    prompt: str
    choices: tuple[str, ...] = ()
    allow_custom: bool = True
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class EmitArtifact:
    artifact_id: str
    name: str
    parts: tuple[dict, ...]
    description: str = ""
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class CallTool:
    server: str
    tool: str
    arguments: dict
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class SetPlan:
    steps: tuple[dict, ...]
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class AdvancePlan:
    """Change one plan step's state and note (progress/v1)."""

    step: int
    state: str
    note: str = ""
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class Wait:
    seconds: float
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class Fail:
    text: str
    reject: bool = False
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class BadToolCall:
    """A tool call the model made that cannot be made (arguments that are not JSON, a tool it
    was not offered): the turn loop hands ``error`` back to the model as the call's result."""

    tool: str
    error: str
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


@dataclass(frozen=True)
class BadReply:
    """A reply of the model that cannot be used at all (no choices, not a chat completion, an
    empty message): the turn loop hands ``error`` back to the model and asks again, a bounded
    number of times in a row (``loop.limits.bad_replies``)."""

    error: str
    cursor: int | None = None  # the model's own bookmark, kept in the transcript


Action = (
    Reply
    | Ask
    | EmitArtifact
    | CallTool
    | SetPlan
    | AdvancePlan
    | Wait
    | Fail
    | BadToolCall
    | BadReply
)
ACTION_TYPES = {
    cls.__name__: cls
    for cls in (
        Reply,
        Ask,
        EmitArtifact,
        CallTool,
        SetPlan,
        AdvancePlan,
        Wait,
        Fail,
        BadToolCall,
        BadReply,
    )
}


def reply_problem(reply: "Action | ModelTurn") -> str | None:
    """Why a model's reply could not be used (its first bad call, or the reply itself), or
    None. A reply of several calls with one bad call counts: the model made a mistake."""
    actions = reply.actions if isinstance(reply, ModelTurn) else (reply,)
    for action in actions:
        if isinstance(action, BadReply | BadToolCall):
            return action.error
    return None


@dataclass(frozen=True)
class Usage:
    """The tokens one model call took; ``model`` names its price (runtime.llm.prices)."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ModelTurn:
    """One reply of a model that may hold several actions (a hosted model's parallel tool
    calls). The turn loop records it in the transcript in one step, then applies its actions
    one step each, in order, without asking the model again until every one has its result.

    ``ids`` names each action (a provider's tool call id) so that the provider finds each
    result again; ``message`` is the reply as the provider will show it back to the model.
    """

    actions: tuple[Action, ...]
    ids: tuple[str, ...]
    message: dict
    usage: Usage | None = None


class ModelError(Exception):
    """The model provider cannot answer and retrying will not help (a refused request, a
    missing credential, retries used up): the turn fails with this message. The message
    never carries a credential."""


class SummaryUnavailable(Exception):
    """The model writes no summaries of held calls (runtime.llm.summary_writing: its
    provider has no ``summarise``, or a scripted model no ``summary`` template): nothing is
    asked, nothing retried."""


def action_dump(action: Action) -> dict:
    """An action as JSON, to keep queued in the transcript (``action_load`` reads it back)."""
    return {"type": type(action).__name__, **dataclasses.asdict(action)}


def action_load(data: dict) -> Action:
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k != "type"
    }
    return ACTION_TYPES[data["type"]](**fields)


class AgentError(Exception):
    """The model or agent could not give a usable next action (an agent URL that answered
    with an invalid reply, or not at all): the turn fails with ``str(exc)``, a message for
    the partner, while ``detail`` (what exactly went wrong) is kept for the admin only."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


@dataclass
class TurnView:
    """What a model may see of a turn: the caller's message and what happened since."""

    text: str
    message_id: str
    data: list[Any] = field(default_factory=list)
    skill_id: str = ""
    transcript: list[dict] = field(default_factory=list)
    connected_apps: AbstractSet[str] = frozenset()  # read when first looked at (runtime.turn)
    # The caller's url parts as the worker fetched them: index, filename, mediaType, size,
    # sha256, and text for text files (runtime.kernel.files); a part that could not be fetched has
    # an ``error`` saying why instead of its content (runtime.turn.inputs).
    files: list[dict] = field(default_factory=list)
    # For providers that describe the turn to something outside (runtime.llm.http_agent):
    # the agent row (its tenant, tools and instructions), the task's public id, its plan.
    agent: Any = None
    task_id: str = ""
    plan: list[dict] = field(default_factory=list)
    # The agent as a hosted model needs it: its instructions (AGENT.md's body), the tools it
    # may call (runtime.tools.catalog.tools_offered) and whether it may ask for connections.
    instructions: str = ""
    tools: list[dict] = field(default_factory=list)
    connections_enabled: bool = False
    # (name, environment=True) -> the secret of the task's own tenant, else the environment's
    # (runtime.llm.credentials.credential_value); raises CredentialMissing. A provider sends it and
    # never shows it to the model.
    credential: Callable[..., str] | None = None
    # Conversation memory (AGENT.md ``memory``): the context's id and this turn's number, the
    # earlier turns of the context the agent's budget keeps (oldest first; runtime.turn.memory
    # makes each record), and how many older turns the budget dropped.
    context_id: str = ""
    turn: int = 1
    history: list[dict] = field(default_factory=list)
    history_dropped: int = 0

    @property
    def answers(self) -> dict[str, Any]:
        # An expired question has no value: the model sees it unanswered, never a made-up one.
        return {
            e["questionId"]: e["value"]
            for e in self.transcript
            if e["type"] == "answer" and e.get("questionId") and "value" in e
        }

    @property
    def actions_taken(self) -> int:
        return sum(1 for e in self.transcript if e["type"] == "action")

    @property
    def last_cursor(self) -> int | None:
        cursors = [e.get("cursor") for e in self.transcript if e["type"] == "action"]
        return cursors[-1] if cursors else None

    @property
    def last_result(self) -> dict | None:
        results = [e for e in self.transcript if e["type"] == "tool_result"]
        return results[-1] if results else None


class LiveWriter(Protocol):
    """Where a streaming provider writes its reply's text as it comes (live output,
    runtime.turn.live_output): the text only, never a tool call or its arguments."""

    def write(self, text: str) -> None: ...

    def restart(self) -> None:
        """The model is asked again (a retried call): the text starts over."""


class ModelProvider(Protocol):
    # Two attributes a provider may have, read with getattr (False when left out):
    # ``in_process``: True for a model that runs in the worker's process and waits on nothing
    # (scripted): the turn loop then asks it without first committing its steps
    # (runtime.turn.runner). Providers that leave it out are asked as network calls.
    # ``streams``: True for a provider that can stream its reply: while the turn's caller
    # streams, it is asked with ``live`` (a LiveWriter) and writes its text there as the model
    # writes it.

    def next_action(self, view: TurnView) -> Action | ModelTurn: ...
