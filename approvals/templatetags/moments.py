"""Times (and JSON in one line) on the operator pages: relative where it helps ("3 hours ago", "in 23 hours"), the
exact time on hover (the title), in the tenant's time zone, never with microseconds.

    {% load moments %}
    {% moment interaction.created_at %}          <time ... title="2 Dec 2026, 14:08:31 CET">3 hours ago</time>
    {% moment interaction.expires_at exact=True %}   2 Dec 2026, 14:08:31 CET, with the relative time on hover
"""

import json

from django import template
from django.utils import timezone
from django.utils.html import format_html

from approvals.presenting import relative_text, when_text

register = template.Library()


@register.simple_tag
def moment(value, exact: bool = False):
    if not value:
        return "—"
    iso, text = when_text(value)
    relative = relative_text(value, timezone.now())
    shown, hover = (text, relative) if exact else (relative, text)
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, hover, shown)


@register.filter
def compact(value) -> str:
    """A JSON value on one line (a receipt's arguments), as text to escape."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
