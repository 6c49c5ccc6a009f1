"""The tasks page's rows written in Python (approvals.task_rows_html) are the markup the
template's loop wrote over Task instances, byte for byte: the loop is kept here as the
reference and both render the same tasks, in every state, with text that needs escaping."""

from datetime import timedelta

import pytest
from django.template import engines
from django.utils import timezone

from approvals.task_rows_html import task_rows_html
from runtime.agents.agent_models import Agent
from runtime.kernel.task_models import Context, Task, TaskState
from runtime.kernel.task_selectors import tenant_tasks_page

pytestmark = pytest.mark.django_db

# The rows' loop as approvals/tasks.html had it before approvals.task_rows_html.
REFERENCE = """\
{% load moments %}{% for task in tasks %}
      <tr>
        <td data-label="Task"><a href="{% url 'approvals:task' task.public_id %}"><code>{{ task.public_id }}</code></a></td>
        <td data-label="Agent">{{ task.agent.name }}</td>
        <td data-label="Caller"><code>{{ task.subject }}</code></td>
        <td data-label="State"><span class="badge state-{{ task.state|lower }}">{{ task.get_state_display }}</span></td>
        <td data-label="Since">{% moment task.status_timestamp %}</td>
      </tr>
      {% endfor %}"""

TRICKY = '<b>"O\'Neil" & co</b>'


def test_the_rows_are_the_loops_markup(agents):
    tenant = agents.a.tenant
    agent = Agent.objects.filter(tenant=tenant).order_by("slug").first()
    agent.name = TRICKY
    agent.save(update_fields=["name"])
    context = Context.objects.create(
        tenant=tenant, agent=agent, subject=f"partner:{TRICKY}", context_id="ctx"
    )
    now = timezone.now()
    # Half a minute inside each span, so that both renderings read the same relative time.
    ages = [timedelta(seconds=30), timedelta(hours=3, seconds=30), timedelta(days=40)]
    Task.objects.bulk_create(
        Task(
            public_id=f"t{i}.{context.key}",
            tenant=tenant,
            agent=agent,
            context=context,
            wire_context_id=context.context_id,
            turn=i,
            subject=context.subject if i % 2 else "partner:plain",
            state=state,
            status_timestamp=now - ages[i % len(ages)] - timedelta(microseconds=i),
        )
        for i, state in enumerate(TaskState.values)
    )
    page = tenant_tasks_page(tenant=tenant, page_size=50)
    assert len(page.rows) == len(TaskState.values)
    tasks = list(
        Task.objects.filter(pk__in=[r.pk for r in page.rows])
        .select_related("agent")
        .order_by("-status_timestamp", "-pk")
    )
    with timezone.override("Europe/Paris"):
        reference = engines["django"].from_string(REFERENCE).render({"tasks": tasks})
        written = task_rows_html(page.rows)
    assert written == reference
    assert "&lt;b&gt;&quot;O&#x27;Neil&quot; &amp; co&lt;/b&gt;" in written
