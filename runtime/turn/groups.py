"""A model reply's calls held together: when the reply's next call is one
the tool policy holds for a person and a later call of the same reply is too, the calls from
this one to the last held one are journalled now, in this block, in the reply's order (each
as runtime.turn.calls journals a call: allowed, denied with its result, held, or refused with
its error), and the held ones open as one approval group (runtime.decisions.approval_groups).
The turn pauses once; it resumes once every held call has its decision, and then each
journalled call is sent (or its denial recorded) in the reply's order, before anything after
them in the reply is applied (runtime.turn.transcript.pending_call).

A reply with one held call, or whose calls the policy lets through, is applied call by call as
before: nothing is looked at ahead but the reply's queued actions, in memory.
"""

from runtime.agents.limits import action_error
from runtime.decisions.approval_groups import HeldApproval
from runtime.decisions.interaction_state import approval_open, interaction_group_open
from runtime.decisions.standing_rules import rule_for_call
from runtime.kernel.task_models import Task
from runtime.llm.actions import BadToolCall, CallTool
from runtime.policy.lookup import policy_for
from runtime.tools.catalog import BUILTIN_SERVER, tool_spec
from runtime.turn.batch import Step, turn_save
from runtime.turn.calls import call_error, call_journal, call_start, held_call_approval
from runtime.turn.transcript import (
    TURN_FIELDS,
    action_record,
    queued_ahead,
    queued_applied,
    tool_result_record,
)


def call_or_group_start(task: Task, action: CallTool) -> Step:
    """Start the model's call (runtime.turn.calls.call_start), or, when it and a later call of
    the same reply are held, the group of the reply's calls from it to the last held one."""
    ahead = queued_ahead(task)
    if not ahead or not _held(task, action):
        return call_start(task, action)
    run: list[tuple[str, CallTool | BadToolCall, bool]] = []
    for queued_id, queued in ahead:
        if isinstance(queued, CallTool) and queued.server != BUILTIN_SERVER:
            run.append((queued_id, queued, _held(task, queued)))
        elif isinstance(queued, BadToolCall):
            run.append((queued_id, queued, False))
        else:
            break  # an action that is not a call (a question, a reply) ends the group
    last = max((i for i, (_, _, held) in enumerate(run) if held), default=None)
    if last is None:
        return call_start(task, action)
    return _group_start(task, action, run[: last + 1])


def _held(task: Task, action: CallTool) -> bool:
    """Whether the policy would hold the call for a person (as runtime.turn.calls decides
    it: a valid call, held by its policy rule, allowed by no standing rule)."""
    if action.server == BUILTIN_SERVER:
        return False
    spec = tool_spec(task.agent, action.server, action.tool)
    if call_error(task, action, spec):
        return False
    policy = policy_for(task.agent, action.server, action.tool, action.arguments)
    if policy.action != "approve":
        return False
    return (
        rule_for_call(task=task, server=action.server, tool=action.tool, arguments=action.arguments)
        is None
    )


def _group_start(task: Task, first: CallTool, run: list) -> Step:
    """Journal ``first`` (the queued action being applied) and the queued actions of ``run``
    in order, then open the held ones as one group (or, should only one be held, as an
    approval of its own)."""
    group = len(task.transcript)  # the first call's step: the calls journalled together
    journalled = [_journal(task, first, group)]
    for queued_id, action, _ in run:
        if action_error(task, action):
            break  # a limit: left queued, the runner applies it (and stops) in its turn
        queued_applied(task, queued_id)
        journalled.append(_journal(task, action, group))
    held = [h for h in journalled if h is not None]
    if len(held) > 1:
        interaction_group_open(task=task, calls=held, also=TURN_FIELDS)
        return False
    if held:
        approval_open(task=task, held=held[0], also=TURN_FIELDS)
        return False
    turn_save(task)
    return True


def _journal(task: Task, action, group: int) -> HeldApproval | None:
    """Record and journal one call of the group's run (runtime.turn.calls does the same for
    a call on its own); its approval when the policy holds it, else None (its result, an
    error or a denial, is recorded; an allowed call is sent once the group is decided)."""
    if isinstance(action, BadToolCall):
        step = action_record(
            task,
            {"kind": "bad_call", "tool": action.tool[:200], "error": action.error},
            action.cursor,
        )
        task.transcript[step]["group"] = group
        tool_result_record(task, step, ok=False, error=action.error)
        return None
    step = action_record(
        task,
        {
            "kind": "call",
            "server": action.server,
            "tool": action.tool,
            "arguments": action.arguments,
        },
        action.cursor,
    )
    # runtime.turn.transcript.pending_call takes the calls of one group in order.
    task.transcript[step]["group"] = group
    spec = tool_spec(task.agent, action.server, action.tool)
    error = call_error(task, action, spec)
    if error or spec is None:  # with no spec, call_error says the tool is unknown
        tool_result_record(task, step, ok=False, error=error or "unknown tool")
        return None
    effect, policy = call_journal(task, step, action, spec)
    if policy.action != "approve":
        return None
    return held_call_approval(effect, spec, policy)
