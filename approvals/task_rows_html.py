"""The tasks page's rows as HTML, written here rather than by the template's loop.

A page is 50 rows; the loop resolved, escaped and localised each value as a template node,
and ``get_state_display`` built the choices' table again for every row: more than half of
the page's CPU (bench/inbox.py "tasks"). This writes the same markup, byte for byte, with
one escape per value; tests/approvals/test_task_rows_html.py renders the loop as it was
over the same tasks and checks that both agree.
"""

from html import escape
from urllib.parse import quote

from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from approvals.presenting import URL_SAFE
from approvals.templatetags.moments import moment
from runtime.kernel.task_models import TaskState
from runtime.kernel.task_selectors import TenantTaskRow

_STATE_LABELS = dict(TaskState.choices)


def _e(value) -> str:
    # As the template's {{ value }}: str() of it, then & < > " ' escaped (django.utils.html).
    return escape(str(value))


def task_rows_html(rows: list[TenantTaskRow]) -> SafeString:
    """The rows of a page (runtime.kernel.task_selectors.tenant_tasks_page), the whitespace
    around each as the loop wrote it."""
    task_url = reverse("approvals:task", args=["-"])[: -len("-/")]
    out = []
    for row in rows:
        url = f"{task_url}{quote(row.public_id, safe=URL_SAFE)}/"
        label = _STATE_LABELS.get(row.state, row.state)
        out.append(
            "\n      <tr>"
            f'\n        <td data-label="Task"><a href="{_e(url)}"><code>{_e(row.public_id)}</code></a></td>'
            f'\n        <td data-label="Agent">{_e(row.agent_name)}</td>'
            f'\n        <td data-label="Caller"><code>{_e(row.subject)}</code></td>'
            f'\n        <td data-label="State"><span class="badge state-{_e(row.state.lower())}">'
            f"{_e(label)}</span></td>"
            f'\n        <td data-label="Since">{moment(row.status_timestamp)}</td>'
            "\n      </tr>\n      "
        )
    return mark_safe("".join(out))  # noqa: S308
