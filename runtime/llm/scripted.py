"""A deterministic model declared in AGENT.md, so that agents run with no provider or network.

    model:
      provider: scripted
      script:
        - when: {text: "deploy build (?P<build>\\S+) to (?P<env>\\S+)"}
          steps:
            - call: {server: deploy, tool: deploy_build, args: {build: "{{ match.build }}", env: "{{ match.env }}"}}
            - reply: "Deployed {{ match.build }} to {{ match.env }}."
        - steps:                       # no `when`: the default rule
            - ask: {id: base, prompt: "Which base branch should I compare this diff against?"}
            - artifact: {name: review.json, data: {base: "{{ answers.base }}"}}
            - reply: "Reviewed against {{ answers.base }}."

The first rule whose ``when`` matches the turn's message runs its steps in order. A step may
carry ``if: {answer: <id>, matches: <regex>}`` (or ``text:``, ``result: ok|error``,
``connected: <app>``, ``notConnected: <app>``, ``earlier: true|false``: whether the
conversation has earlier turns) and is skipped when that does not hold when its turn comes.
Templates may name the conversation's earlier turns (``{{ previous.text }}``, ``{{
previous.reply }}``, ``{{ history.0.text }}``): a script that does is given them (conversation
memory, runtime.turn.memory); one that does not reads nothing more. Each action carries the index of its step (the cursor), which the turn loop
keeps in the transcript, so the model keeps no state between calls and a skipped step
stays skipped even if its condition would hold later.
"""

import dataclasses
import json
import re
from typing import Any

from runtime.llm.actions import (
    AdvancePlan,
    Ask,
    CallTool,
    EmitArtifact,
    Fail,
    Reply,
    SetPlan,
    SummaryUnavailable,
    TurnView,
    Wait,
)

ACTIONS = {
    "reply",
    "message",
    "ask",
    "artifact",
    "call",
    "connect",
    "plan",
    "progress",
    "wait",
    "fail",
    "reject",
}
PLAN_STATES = {"pending", "active", "completed", "failed", "skipped"}
WHEN_KEYS = {"text", "messageIdPrefix", "skill"}
TEMPLATE_RE = re.compile(r"\{\{\s*([\w.-]+)\s*\}\}")


class ScriptError(Exception):
    def __init__(self, path: list, message: str):
        self.path, self.message = path, message
        super().__init__(f"{'.'.join(map(str, path))}: {message}")


def validate_script(script: Any) -> None:
    if not isinstance(script, list):
        raise ScriptError([], "must be a list of rules")
    for r, rule in enumerate(script):
        if (
            not isinstance(rule, dict)
            or not isinstance(rule.get("steps"), list)
            or not rule["steps"]
        ):
            raise ScriptError([r], "each rule needs a non-empty list of steps")
        when = rule.get("when", {})
        if not isinstance(when, dict) or set(when) - WHEN_KEYS:
            raise ScriptError([r, "when"], f"may only use {sorted(WHEN_KEYS)}")
        if "text" in when:
            try:
                re.compile(when["text"])
            except re.error as exc:
                raise ScriptError(
                    [r, "when", "text"], f"not a valid regular expression: {exc}"
                ) from None
        for s, step in enumerate(rule["steps"]):
            if not isinstance(step, dict):
                raise ScriptError([r, "steps", s], "each step is a mapping with one action")
            actions = set(step) & ACTIONS
            if len(actions) != 1 or set(step) - ACTIONS - {"if"}:
                raise ScriptError(
                    [r, "steps", s], f"needs exactly one of {sorted(ACTIONS)} (and optionally if)"
                )
            action = actions.pop()
            value = step[action]
            if action == "ask" and (
                not isinstance(value, dict) or not value.get("prompt") or not value.get("id")
            ):
                raise ScriptError([r, "steps", s, "ask"], "needs an id and a prompt")
            if action == "call" and (
                not isinstance(value, dict) or not value.get("server") or not value.get("tool")
            ):
                raise ScriptError([r, "steps", s, "call"], "needs a server and a tool")
            if action == "connect" and (not isinstance(value, dict) or not value.get("app")):
                raise ScriptError([r, "steps", s, "connect"], "needs an app")
            if action == "artifact":
                kinds = {"text", "data", "raw", "url"} & set(
                    value if isinstance(value, dict) else {}
                )
                if not isinstance(value, dict) or not value.get("name") or len(kinds) != 1:
                    raise ScriptError(
                        [r, "steps", s, "artifact"], "needs a name and one of text, data, raw, url"
                    )
            if action == "plan" and not isinstance(value, list):
                raise ScriptError([r, "steps", s, "plan"], "must be a list of {label, state, note}")
            if action == "progress" and (
                not isinstance(value, dict)
                or not isinstance(value.get("step"), int)
                or value.get("state") not in PLAN_STATES
            ):
                raise ScriptError(
                    [r, "steps", s, "progress"],
                    f"needs a step (its index in the plan) and a state, one of {sorted(PLAN_STATES)}",
                )
            if action == "wait" and not isinstance(value, int | float):
                raise ScriptError([r, "steps", s, "wait"], "must be a number of seconds")


def _lookup(scope: dict, dotted: str) -> Any:
    value: Any = scope
    for part in dotted.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]  # files.0.text
        else:
            return ""
    return value


def render(value: Any, scope: dict) -> Any:
    """Fill ``{{ name }}`` placeholders; a string that is one placeholder keeps its JSON type."""
    if isinstance(value, str):
        whole = TEMPLATE_RE.fullmatch(value.strip())
        if whole:
            return _lookup(scope, whole.group(1))
        return TEMPLATE_RE.sub(lambda m: _text(_lookup(scope, m.group(1))), value)
    if isinstance(value, dict):
        return {k: render(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, scope) for v in value]
    return value


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


# A script that names the conversation's earlier turns (templates or an ``earlier`` condition).
MEMORY_RE = re.compile(r"\{\{\s*(previous|history)\b|\"earlier\":")


class ScriptedModel:
    in_process = True  # no network: its steps go on in the turn's open transaction

    def __init__(self, script: list[dict], summary: str | None = None):
        self.script = script
        # ``summary``: a template over the held call (``{{ args.build }}``, ``{{ tool }}``)
        # that stands for a model's summary of it (runtime.llm.summary_writing).
        self.summary = summary
        # Only a script that uses the earlier turns has them read (runtime.turn.memory): the
        # others' turns cost what they did.
        self.uses_memory = bool(MEMORY_RE.search(json.dumps(script)))

    def summarise(self, ask, credential=None) -> str:
        """The ``summary`` template filled from the held call (``ask``: a SummaryAsk)."""
        if not isinstance(self.summary, str) or not self.summary.strip():
            raise SummaryUnavailable("the scripted model has no summary template")
        scope = {"args": ask.arguments, "tool": ask.tool, "server": ask.server}
        return _text(render(self.summary, scope))

    def _rule(self, view: TurnView) -> tuple[dict | None, dict]:
        for rule in self.script:
            when = rule.get("when", {})
            groups: dict = {}
            if "messageIdPrefix" in when and not view.message_id.startswith(
                when["messageIdPrefix"]
            ):
                continue
            if "skill" in when and view.skill_id != when["skill"]:
                continue
            if "text" in when:
                match = re.search(when["text"], view.text, re.IGNORECASE)
                if not match:
                    continue
                groups = match.groupdict()
            return rule, groups
        return None, {}

    def next_action(self, view: TurnView):
        rule, groups = self._rule(view)
        if rule is None:
            return Fail("This agent has no answer for that message.")
        last = view.last_result or {}
        # The last call's approval with arguments an operator edited, if any.
        edit = next(
            (
                e
                for e in reversed(view.transcript)
                if e["type"] == "answer" and e.get("edited") and e.get("step") == last.get("step")
            ),
            None,
        )
        # The arguments the last call went out with: an operator's edit, else the call's own
        # (what the demo deployer reports: never what was merely asked for).
        asked = next(
            (
                (e.get("action") or {}).get("arguments")
                for e in view.transcript
                if e["type"] == "action" and e.get("step") == last.get("step")
            ),
            None,
        )
        earlier = [
            {
                "turn": record.get("turn"),
                "text": (record.get("message") or {}).get("text", ""),
                "reply": record.get("reply", ""),
                "state": record.get("state", ""),
            }
            for record in view.history
        ]
        scope = {
            "text": view.text,
            "match": groups,
            "history": earlier,
            "previous": earlier[-1] if earlier else {},
            "answers": view.answers,
            "files": view.files,
            "last": {
                "result": last.get("result"),
                "error": last.get("error"),
                "ok": last.get("ok"),
                # Why a call did not run (an operator's denial reason, "expired", the policy),
                # else its error: what the model should tell the caller.
                "reason": last.get("reason") or last.get("error") or "",
                "edited": edit is not None,
                "arguments": edit.get("arguments") if edit else None,
                "sent": (edit.get("arguments") if edit else asked) or {},
            },
        }
        start = 0 if view.last_cursor is None else view.last_cursor + 1
        for index in range(start, len(rule["steps"])):
            step = rule["steps"][index]
            if self._holds(step.get("if"), view, scope):
                return dataclasses.replace(self._action(step, scope, index), cursor=index)
        # Every step ran and none ended the turn.
        return Reply("Done.")

    @staticmethod
    def _holds(condition: dict | None, view: TurnView, scope: dict) -> bool:
        if not condition:
            return True
        if "answer" in condition:
            value = view.answers.get(condition["answer"])
            if value is None:
                return False
            return (
                re.fullmatch(
                    condition.get("matches", ".*"), _text(value), re.IGNORECASE | re.DOTALL
                )
                is not None
            )
        if "text" in condition:
            return re.search(condition["text"], view.text, re.IGNORECASE) is not None
        if "result" in condition:
            want = condition["result"]  # "ok" or "error"
            return bool(scope["last"]["ok"]) == (want == "ok")
        if "connected" in condition:
            return condition["connected"] in view.connected_apps
        if "notConnected" in condition:
            return condition["notConnected"] not in view.connected_apps
        if "earlier" in condition:
            return bool(scope["history"]) == bool(condition["earlier"])
        return True

    @staticmethod
    def _action(step: dict, scope: dict, position: int):
        if "reply" in step:
            return Reply(str(render(step["reply"], scope)))
        if "message" in step:
            return Reply(str(render(step["message"], scope)), direct=True)
        if "ask" in step:
            ask = step["ask"]
            return Ask(
                question_id=ask["id"],
                prompt=str(render(ask["prompt"], scope)),
                choices=tuple(str(c) for c in ask.get("choices", [])),
                allow_custom=bool(ask.get("allowCustom", not ask.get("choices"))),
            )
        if "artifact" in step:
            spec = render(step["artifact"], scope)
            part: dict = {}
            for kind in ("text", "data", "raw", "url"):
                if kind in spec:
                    part[kind] = spec[kind]
            for key in ("filename", "mediaType"):
                if key in spec:
                    part[key] = spec[key]
            if "data" in part and "mediaType" not in part:
                part["mediaType"] = "application/json"
            return EmitArtifact(
                artifact_id=spec.get("id") or spec["name"],
                name=spec["name"],
                parts=(part,),
                description=spec.get("description", ""),
            )
        if "call" in step:
            call = render(step["call"], scope)
            return CallTool(
                server=call["server"], tool=call["tool"], arguments=call.get("args", {}) or {}
            )
        if "connect" in step:
            spec = render(step["connect"], scope)
            return CallTool(
                server="countersign",
                tool="request_connection",
                arguments={"app": spec["app"], "reason": spec.get("reason", "")},
            )
        if "plan" in step:
            return SetPlan(steps=tuple(render(step["plan"], scope)))
        if "progress" in step:
            spec = render(step["progress"], scope)
            return AdvancePlan(
                step=int(spec["step"]), state=str(spec["state"]), note=str(spec.get("note", ""))
            )
        if "wait" in step:
            return Wait(seconds=float(step["wait"]))
        if "fail" in step:
            return Fail(str(render(step["fail"], scope)))
        if "reject" in step:
            return Fail(str(render(step["reject"], scope)), reject=True)
        raise ScriptError([position], "unknown step")
