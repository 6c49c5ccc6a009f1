"""The inbox list's rows as HTML, written here rather than by the template's loop.

A page is 50 rows of some 17 values and 16 conditions each: Django's template engine
resolved, localised and escaped them one node at a time, a third of the page's CPU at
10,000 open items (bench/inbox.py). This writes the same markup, byte for byte, with one
escape per value; tests/approvals/test_inbox_html.py renders its reference template (the
loop as it was) over varied rows and checks that both agree.
"""

from html import escape as _escape

from django.utils.safestring import SafeString, mark_safe


def _e(value) -> str:
    # As the template's {{ value }}: str() of it, then & < > " ' escaped (django.utils.html).
    return _escape(str(value))


def _head(item: dict, can_bulk: bool) -> str:
    out = []
    if can_bulk and item["kind"] == "approval":
        pid = _e(item["public_id"])
        out.append(
            f'<input type="checkbox" name="ids" value="{pid}" form="bulk-form" '
            f'id="select-{pid}" aria-label="Select {_e(item["headline"])}">'
        )
    out.append(
        f'\n      <a id="item-{_e(item["public_id"])}" class="inbox-headline" '
        f'href="{_e(item["url"])}">{_e(item["headline"])}</a>\n      '
    )
    for class_, text in item["badges"]:
        out.append(f'<span class="badge {_e(class_)}">{_e(text)}</span>')
    out.append("\n      ")
    if item["state"] != "open":
        out.append(f'<span class="badge">{_e(item["state"])}</span>')
    out.append("\n      ")
    if item["approved_by_me"] and item["state"] == "open":
        out.append('<span class="badge mine">you approved</span>')
    return "".join(out)


def _summary(summary) -> str:
    flagged = summary["flagged"]
    return (
        f'<p class="model-summary-row{" flagged" if flagged else ""}" data-model-summary'
        f'{" data-flagged" if flagged else ""}><span class="muted">Summary written by a '
        f"model:</span> {_e(summary['text'])}"
        + (
            " <strong>(may be wrong: it names values the arguments do not hold)</strong>"
            if flagged
            else ""
        )
        + "</p>"
    )


def _group(calls) -> str:
    out = ['<ol class="inbox-group" aria-label="The calls of this reply">']
    for call in calls:
        out.append(
            f'<li data-call="{_e(call["public_id"])}" data-state="{_e(call["state"])}">'
            f'<a href="{_e(call["url"])}">{_e(call["summary"] or call["prompt"])}</a>'
        )
        if call["impact"]:
            out.append(f' <span class="impact" data-impact>{_e(call["impact"])}</span>')
        if call["summary"]:
            out.append(f' <span class="muted">{_e(call["prompt"])}</span>')
        if call["state"] != "open":
            out.append(f' <span class="badge">{_e(call["state"])}</span>')
        out.append("</li>")
    out.append("</ol>")
    return "".join(out)


def _meta(item: dict) -> str:
    out = [
        f'\n      <span class="badge {_e(item["kind"])}">{_e(item["kind"])}</span>'
        f'\n      <span class="inbox-agent"><strong>{_e(item["agent_name"])}</strong></span>'
        "\n      "
    ]
    if item["headline"] != item["prompt"]:
        out.append(f'<span class="inbox-prompt">{_e(item["prompt"])}</span>')
    age = f"{_e(item['age'])} ago" if item["age"] else "just now"
    out.append(
        f"\n      <span>for <code>{_e(item['subject'])}</code></span>"
        f'\n      <span class="inbox-task">task <code>{_e(item["task_id"])}</code></span>'
        f'\n      <span><time datetime="{_e(item["created"])}" '
        f'title="{_e(item["created_title"])}">{age}</time></span>\n      '
    )
    if item["ladder"]:
        out.append(f'<span class="ladder">{_e(item["ladder"])}</span>')
    out.append("\n      ")
    if item["progress"]:
        out.append(f'<span class="approvals-progress">{_e(item["progress"])} approvals</span>')
    out.append("\n      ")
    if item["expires"] and item["state"] == "open":
        out.append(
            f'<span>expires in <time datetime="{_e(item["expires"])}" '
            f'title="{_e(item["expires_title"])}">{_e(item["expires_in"])}</time></span>'
        )
    out.append("\n    ")
    return "".join(out)


def row_html(item: dict, *, can_bulk: bool) -> str:
    """One row (approvals.inbox_views.inbox_rows, with_ladders) as the list's loop wrote it,
    the whitespace around it included."""
    tone = f" tone-{_e(item['tone'])}" if item["tone"] else ""
    mine = " data-approved-by-me" if item["approved_by_me"] else ""
    out = [
        f'\n  <li class="card inbox-item{tone}" data-id="{_e(item["public_id"])}" '
        f'data-kind="{_e(item["kind"])}" data-url="{_e(item["url"])}" '
        f'data-state="{_e(item["state"])}"{mine}>\n    <p class="inbox-head">\n      ',
        _head(item, can_bulk),
        "\n    </p>\n    ",
    ]
    if item["impact"]:
        out.append(f'<p class="impact" data-impact>{_e(item["impact"])}</p>')
    out.append("\n    ")
    if item["model_summary"]:
        out.append(_summary(item["model_summary"]))
    out.append("\n    ")
    if item.get("group"):
        out.append(_group(item["group"]))
    out.append('\n    <p class="inbox-meta muted">')
    out.append(_meta(item))
    out.append("</p>\n  </li>\n  ")
    return "".join(out)


def rows_html(items: list[dict], *, can_bulk: bool) -> SafeString:
    """The list's rows, each escaped value by value here (the template inserts it as is)."""
    return mark_safe("".join(row_html(item, can_bulk=can_bulk) for item in items))  # noqa: S308
