"""``/dev/outbox/``: the e-mails development kept instead of sending them (config.outbox),
to read and to follow their links (an invitation's, an approval's one-time links) with no
mail server and no quoted-printable to decode by hand.

Only with DEBUG (404 otherwise) and only for someone signed in: on a developer's machine
every kept message is theirs to read, whichever tenant it concerns. The text part is shown
escaped, its links made links; the HTML part in a sandboxed frame of its own (no script, an
origin of its own, only its own inline styles and data: images), whose links open in the
window itself.
"""

from functools import wraps
from html.parser import HTMLParser

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET

from config.outbox import outbox_names, outbox_read

# The HTML part's own policy: no script, no request anywhere, links open in the top window
# only on a click (the frame's sandbox says the same).
HTML_PART_POLICY = "; ".join(
    [
        "sandbox allow-popups allow-popups-to-escape-sandbox "
        "allow-top-navigation-by-user-activation",
        "default-src 'none'",
        "style-src 'unsafe-inline'",
        "img-src data:",
        "frame-ancestors 'self'",
    ]
)


def debug_only(view):
    """404 unless DEBUG: the outbox is development's, never a deployment's."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not settings.DEBUG:
            raise Http404("No outbox here.")
        return view(request, *args, **kwargs)

    return wrapped


class _Links(HTMLParser):
    """The http(s) links of an HTML part, with their text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links: list[dict] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href") or ""
            self._href = href if href.startswith(("http://", "https://")) else None
            self._text = []

    def handle_data(self, data):
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            text = " ".join("".join(self._text).split())
            self.links.append({"href": self._href, "text": text or self._href})
            self._href = None


def _parts(message) -> tuple[str, str]:
    """The message's text and HTML parts, decoded (quoted-printable, base64, charsets)."""
    text_part = message.get_body(preferencelist=("plain",))
    html_part = message.get_body(preferencelist=("html",))
    text = text_part.get_content() if text_part is not None else ""
    html = html_part.get_content() if html_part is not None else ""
    return text, html


@require_GET
@debug_only
@login_required
def outbox_list(request):
    mails = []
    for name in outbox_names():
        message = outbox_read(name, headers_only=True)
        if message is not None:
            mails.append(
                {
                    "name": name,
                    "subject": str(message.get("subject", "")),
                    "to": str(message.get("to", "")),
                    "date": str(message.get("date", "")),
                    "url": reverse("dev_outbox_mail", args=[name]),
                }
            )
    return render(request, "dev/outbox.html", {"mails": mails})


@require_GET
@debug_only
@login_required
def outbox_mail(request, name: str):
    message = outbox_read(name)
    if message is None:
        raise Http404("No such message.")
    text, html = _parts(message)
    links = _Links()
    links.feed(html)
    context = {
        "name": name,
        "headers": [(h, str(message.get(h, ""))) for h in ("From", "To", "Subject", "Date")],
        "text": text,
        "html_url": reverse("dev_outbox_html", args=[name]) if html else "",
        "links": links.links,
    }
    return render(request, "dev/outbox_mail.html", context)


@require_GET
@debug_only
@login_required
@xframe_options_sameorigin
def outbox_html(request, name: str):
    message = outbox_read(name)
    if message is None:
        raise Http404("No such message.")
    _, html = _parts(message)
    if not html:
        raise Http404("The message has no HTML part.")
    # Its links open in the window, not in the frame (a page in a frame of a frame is refused
    # by every page of the site: X-Frame-Options). After the doctype, if any: before it, the
    # page would be read in quirks mode.
    head, sep, rest = (
        html.partition(">")
        if html.lstrip().lower().startswith("<!doctype")
        else (
            "",
            "",
            html,
        )
    )
    response = HttpResponse(f'{head}{sep}<base target="_top">{rest}', content_type="text/html")
    response["Content-Security-Policy"] = HTML_PART_POLICY
    response["Cache-Control"] = "no-store"
    return response
