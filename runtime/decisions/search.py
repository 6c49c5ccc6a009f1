"""What the inbox's search looks in: one text per interaction, written when it opens
(``Interaction.search_text``), casefolded, and indexed by trigrams on PostgreSQL (migration
runtime 0019), so that a search over 10,000 open items is one index read, not a scan of
every row's prompt, task, agent and arguments.

It holds the prompt, the ids (interaction, task), the caller, the agent's slug and name, and
for a held call its server, tool and arguments; never a redacted value: nobody sees those
on a list, so nobody may find an item by them either (a search that matched would tell
the value, one guess at a time).
"""

from runtime.decisions.decision_models import Interaction
from runtime.decisions.summaries import REDACTED, held_call_view, redacted
from runtime.policy.title_syntax import call_terms

SEARCH_TEXT_MAX = 4000
_VALUE_MAX = 200


def search_text(
    *,
    public_id: str,
    kind: str,
    prompt: str,
    subject: str,
    task_public_id: str,
    agent_slug: str,
    agent_name: str,
    detail: dict | None,
    request: dict | None,
) -> str:
    """The casefolded text an interaction is found by (see the module)."""
    parts = [prompt, public_id, task_public_id, subject, agent_slug, agent_name]
    call = (request or {}).get("call")
    if kind == "approval" and isinstance(call, dict):
        parts += [f"{call.get('server', '')} / {call.get('tool', '')}"]
        arguments = call.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        parts += _argument_words(redacted(arguments, call_terms(call).get("redact", ())))
    else:
        detail = detail or {}
        parts += [str(detail.get(key, "")) for key in ("server", "tool", "app", "reason")]
        parts += [str(choice) for choice in (request or {}).get("choices") or []]
    text = "\n".join(str(part)[:_VALUE_MAX] for part in parts if part not in ("", None))
    # NUL is refused by PostgreSQL's text; the rest is kept for LIKE to find.
    return text.replace("\x00", "").casefold()[:SEARCH_TEXT_MAX]


def search_query(raw: str) -> str:
    """A search as the inbox matches it against ``search_text``."""
    return raw.replace("\x00", "").strip().casefold()


def _argument_words(arguments: dict) -> list[str]:
    """``key=value`` for each top-level scalar, then every scalar inside nested values."""
    words = []
    for key in sorted(arguments):
        value = arguments[key]
        if value == REDACTED:
            continue
        if isinstance(value, dict | list):
            words += [str(leaf) for leaf in _leaves(value)]
        else:
            words.append(f"{key}={_scalar(value)}")
    return words


def _leaves(value, depth: int = 0):
    if depth > 8:
        return
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if isinstance(item, dict | list):
            yield from _leaves(item, depth + 1)
        elif item != REDACTED and item is not None:
            yield _scalar(item)


def _scalar(value) -> str:
    if value is True or value is False:
        return "true" if value else "false"
    return "" if value is None else str(value)


def listing_columns(*, task, public_id: str, kind: str, prompt: str, detail, request) -> dict:
    """The columns a list reads an interaction opening on ``task`` by (its agent read with
    it): ``search_text``, and the held call's redacted one-line ``summary`` and ``impact``
    (runtime.decisions.summaries), so that a page of 50 rows reads neither 50 calls'
    arguments nor anything else to show them."""
    view = held_call_view(Interaction(kind=kind, detail=detail, request=request))
    return {
        "search_text": search_text(
            public_id=public_id,
            kind=kind,
            prompt=prompt,
            subject=task.subject,
            task_public_id=task.public_id,
            agent_slug=task.agent.slug,
            agent_name=task.agent.name,
            detail=detail,
            request=request,
        ),
        "summary": view["summary"] if view else "",
        "impact": view["impact"] if view else "",
    }


def listing_of(task, interaction) -> dict:
    """The columns a list finds and shows ``interaction`` by, as it stands now."""
    return listing_columns(
        task=task,
        public_id=interaction.public_id,
        kind=interaction.kind,
        prompt=interaction.prompt,
        detail=interaction.detail,
        request=interaction.request,
    )
