"""The site's error pages: Django's own (django.views.defaults), minus one way they failed.

Django's error views ensure a CSRF token for their template (``requires_csrf_token``), and
for a POST from a browser that holds a CSRF cookie that reads the form body, looking for
the token. A body Django cannot parse (multipart/form-data without a boundary, or with more
files than DATA_UPLOAD_MAX_NUMBER_FILES) then raised inside the error view itself, and the
404 of a URL that matches nothing, or the 400 of a request for another host, became a 500.
Each view here reads the body first: after that error Django holds the body as empty, and
the page is the one the request earned.
"""

from django.core.exceptions import TooManyFilesSent
from django.http.multipartparser import MultiPartParserError
from django.views import defaults


def _body_read(request) -> None:
    try:
        request.POST  # noqa: B018 - read for its side effect
    except (MultiPartParserError, TooManyFilesSent):
        pass  # Django keeps an empty POST after these (HttpRequest._mark_post_parse_error)


def bad_request(request, exception):
    _body_read(request)
    return defaults.bad_request(request, exception)


def permission_denied(request, exception):
    _body_read(request)
    return defaults.permission_denied(request, exception)


def page_not_found(request, exception):
    _body_read(request)
    return defaults.page_not_found(request, exception)


def server_error(request):
    _body_read(request)
    return defaults.server_error(request)
