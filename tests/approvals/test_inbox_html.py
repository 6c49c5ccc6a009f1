"""The inbox list's rows written in Python (approvals.inbox_html) are the markup the
template's loop wrote, byte for byte: the loop is kept here as the reference and both render
rows that take every branch, with text that needs escaping."""

import itertools

from django.template import engines

from approvals.inbox_html import rows_html

# The list's loop as approvals/_inbox_list.html had it before approvals.inbox_html.
REFERENCE = """\
{% for item in items %}
  <li class="card inbox-item{% if item.tone %} tone-{{ item.tone }}{% endif %}" data-id="{{ item.public_id }}" data-kind="{{ item.kind }}" data-url="{{ item.url }}" data-state="{{ item.state }}"{% if item.approved_by_me %} data-approved-by-me{% endif %}>
    <p class="inbox-head">
      {% if can_bulk and item.kind == "approval" %}<input type="checkbox" name="ids" value="{{ item.public_id }}" form="bulk-form" id="select-{{ item.public_id }}" aria-label="Select {{ item.headline }}">{% endif %}
      <a id="item-{{ item.public_id }}" class="inbox-headline" href="{{ item.url }}">{{ item.headline }}</a>
      {% for class, text in item.badges %}<span class="badge {{ class }}">{{ text }}</span>{% endfor %}
      {% if item.state != "open" %}<span class="badge">{{ item.state }}</span>{% endif %}
      {% if item.approved_by_me and item.state == "open" %}<span class="badge mine">you approved</span>{% endif %}
    </p>
    {% if item.impact %}<p class="impact" data-impact>{{ item.impact }}</p>{% endif %}
    {% if item.model_summary %}<p class="model-summary-row{% if item.model_summary.flagged %} flagged{% endif %}" data-model-summary{% if item.model_summary.flagged %} data-flagged{% endif %}><span class="muted">Summary written by a model:</span> {{ item.model_summary.text }}{% if item.model_summary.flagged %} <strong>(may be wrong: it names values the arguments do not hold)</strong>{% endif %}</p>{% endif %}
    {% if item.group %}<ol class="inbox-group" aria-label="The calls of this reply">{% for call in item.group %}<li data-call="{{ call.public_id }}" data-state="{{ call.state }}"><a href="{{ call.url }}">{{ call.summary|default:call.prompt }}</a>{% if call.impact %} <span class="impact" data-impact>{{ call.impact }}</span>{% endif %}{% if call.summary %} <span class="muted">{{ call.prompt }}</span>{% endif %}{% if call.state != "open" %} <span class="badge">{{ call.state }}</span>{% endif %}</li>{% endfor %}</ol>{% endif %}
    <p class="inbox-meta muted">
      <span class="badge {{ item.kind }}">{{ item.kind }}</span>
      <span class="inbox-agent"><strong>{{ item.agent_name }}</strong></span>
      {% if item.headline != item.prompt %}<span class="inbox-prompt">{{ item.prompt }}</span>{% endif %}
      <span>for <code>{{ item.subject }}</code></span>
      <span class="inbox-task">task <code>{{ item.task_id }}</code></span>
      <span><time datetime="{{ item.created }}" title="{{ item.created_title }}">{% if item.age %}{{ item.age }} ago{% else %}just now{% endif %}</time></span>
      {% if item.ladder %}<span class="ladder">{{ item.ladder }}</span>{% endif %}
      {% if item.progress %}<span class="approvals-progress">{{ item.progress }} approvals</span>{% endif %}
      {% if item.expires and item.state == "open" %}<span>expires in <time datetime="{{ item.expires }}" title="{{ item.expires_title }}">{{ item.expires_in }}</time></span>{% endif %}
    </p>
  </li>
  {% endfor %}"""

TRICKY = '<b>"O\'Neil" & co</b>'


def row(**changes) -> dict:
    base = {
        "kind": "approval",
        "public_id": "int_1",
        "url": "/inbox/i/int_1/?q=a&state=open",
        "prompt": "Approve deploy/deploy_build",
        "summary": "",
        "headline": "Approve deploy/deploy_build",
        "impact": "",
        "badges": [],
        "tone": "",
        "approved_by_me": False,
        "state": "open",
        "task_id": "t1.abc",
        "agent_name": "Deployer",
        "subject": "partner:acme",
        "created": "2026-12-04T10:00:00+00:00",
        "created_title": "4 Dec 2026, 10:00:00 UTC",
        "age": "3 hours",
        "expires": None,
        "progress": "",
        "ladder": "",
        "model_summary": None,
    }
    return base | changes


CALLS = [
    {
        "public_id": "int_2",
        "position": 1,
        "prompt": "Approve deploy",
        "summary": TRICKY,
        "impact": "Ships to production",
        "state": "open",
        "url": "/inbox/i/int_2/",
    },
    {
        "public_id": "int_3",
        "position": 2,
        "prompt": "Approve <deploy>",
        "summary": "",
        "impact": "",
        "state": "answered",
        "url": "/inbox/i/int_3/?q=x&y=1",
    },
]

VARIANTS = [
    row(),
    row(kind="question", headline=TRICKY, prompt="What now?", age=""),
    row(
        tone="high",
        badges=[("risk-high", "risk: high"), ("two-person", "2 people")],
        approved_by_me=True,
        impact=TRICKY,
        progress="1 of 2",
        ladder="escalated to admin",
        expires="2026-12-05T10:00:00+00:00",
        expires_title="5 Dec 2026",
        expires_in="23 hours",
    ),
    row(
        state="answered",
        approved_by_me=True,
        expires="2026-12-05T10:00:00+00:00",
        expires_title="5 Dec",
        expires_in="1 day",
    ),
    row(model_summary={"text": TRICKY, "flagged": True}, subject=TRICKY),
    row(model_summary={"text": "Deploys b-1", "flagged": False}, agent_name=TRICKY),
    row(group=CALLS, headline="Approve 2 calls of one reply", prompt="Approve 2 calls"),
    row(kind="uncertain", url="/inbox/e/eff_1/", tone="people", badges=[("staged", "x")]),
    row(kind="connection", public_id=TRICKY, task_id=TRICKY, created_title=TRICKY),
]


def test_the_rows_are_the_reference_loops_markup():
    template = engines["django"].from_string(REFERENCE)
    for can_bulk, size in itertools.product((True, False), (1, 2, len(VARIANTS))):
        items = VARIANTS[:size] if size < len(VARIANTS) else VARIANTS
        expected = template.render({"items": items, "can_bulk": can_bulk})
        assert rows_html(items, can_bulk=can_bulk) == expected
    for item in VARIANTS:
        for can_bulk in (True, False):
            expected = template.render({"items": [item], "can_bulk": can_bulk})
            assert rows_html([item], can_bulk=can_bulk) == expected, item
