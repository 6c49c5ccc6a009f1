"""config.settings for a server a test starts in a subprocess (tests.live.LiveStack), with
DEBUG on or off as the test asks, and two differences that bear on nothing but the test:
the static files are served as they are (a test runs no collectstatic, which production's
manifest storage needs), and the test suite's fast password hasher is known (its users log
in over HTTP)."""

from django.conf import global_settings

from config.settings import *  # noqa: F403
from config.settings import STORAGES

STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
PASSWORD_HASHERS = [
    *global_settings.PASSWORD_HASHERS,
    "django.contrib.auth.hashers.MD5PasswordHasher",
]
