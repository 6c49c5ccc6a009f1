"""Countersign settings.

With no environment at all this runs the embedded default: SQLite (WAL) and Celery's
filesystem transport under ``var/``, debug on, and a generated development secret.
Every deployment knob comes from the environment; ``.env.example`` lists them.
"""

import secrets
import warnings
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import dotenv_load, env_bool, env_int, env_list, env_secret, env_str, listen_url

# .env beside manage.py (or ENV_FILE), for what the environment does not set itself.
dotenv_load()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("VAR_DIR", str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DEBUG", True)


def _secret_key() -> str:
    key = env_secret("SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) is required when DEBUG is off.")
    # A development secret generated once and kept under var/, so sessions survive restarts.
    path = VAR_DIR / "dev-secret-key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
# Earlier SECRET_KEYs, comma-separated (or SECRET_KEY_FALLBACKS_FILE), still accepted for
# what they signed (sessions, password reset and invitation links, file download links)
# while SECRET_KEY takes over: the rotation docs/how-to/rotate-keys.md describes.
SECRET_KEY_FALLBACKS = [
    key.strip() for key in env_secret("SECRET_KEY_FALLBACKS").split(",") if key.strip()
]
ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
# The public base URL (scheme://host[:port]) used in agent cards and e-mails when the
# request itself cannot tell (behind a proxy that rewrites Host).
PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL").rstrip("/")
# Where this server listens: `make run` (scripts/run.py) and gunicorn.conf.py bind HOST and
# PORT. Links made with no request to answer (e-mails, Slack messages, invitations from a
# shell, the banner) point at PUBLIC_BASE_URL, else NOTIFY_BASE_URL, else here
# (config.site.site_url): one host everywhere, the one whose login the banner prints.
LISTEN_URL = listen_url(env_str("HOST", "127.0.0.1"), env_str("PORT", "8000"))
# How long the link of a member's invitation (which sets their password) works.
INVITATION_LINK_DAYS = env_int("INVITATION_LINK_DAYS", 7)
# How long a process keeps the receipt signing key it loaded (runtime.decisions.signing).
RECEIPT_KEY_CACHE_SECONDS = env_int("RECEIPT_KEY_CACHE_SECONDS", 60)

INSTALLED_APPS = [
    # django.contrib.admin, with a site that scopes every model admin to the tenant of a
    # tenant's admin (tenants.admin_scope).
    "tenants.admin_config.CountersignAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's files, served from static/ for the API explorer (/api/docs/): no CDN.
    "drf_spectacular_sidecar",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.mfa",
    # The generic OpenID Connect provider, so that admins can create social applications for
    # OAuth2 connection apps (its server_url gives the endpoints by discovery).
    "allauth.socialaccount.providers.openid_connect",
    "tenants",
    "runtime",
    "a2a_endpoint",
    "mcp_gateway",
    "approvals",
    "connections",
    "notifications",
    "integrations",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "tenants.middleware.CurrentTenantMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The site's templates, and each notification medium's (integrations/<medium>/templates/:
        # a medium's folder holds its templates, as it holds its views and models).
        "DIRS": [BASE_DIR / "templates", *sorted((BASE_DIR / "integrations").glob("*/templates"))],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenants.context_processors.current_tenant",
            ],
        },
    },
]

# --- Database -----------------------------------------------------------------------------
DATABASE_URL = env_secret("DATABASE_URL")
SQLITE_OPTIONS = {
    # WAL lets the web process read while a worker writes; IMMEDIATE takes the write lock at
    # BEGIN so that two writers queue instead of failing mid-transaction.
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
}
if DATABASE_URL.startswith("sqlite"):
    _db = dj_database_url.parse(DATABASE_URL)
    _db["OPTIONS"] = dict(SQLITE_OPTIONS)
elif DATABASE_URL:
    _db = dj_database_url.parse(DATABASE_URL)
    if _db["ENGINE"] == "django.db.backends.postgresql" and env_bool("DATABASE_POOL", True):
        # psycopg 3's pool: connections are reused across requests and threads.
        _db["CONN_MAX_AGE"] = 0
        _db.setdefault("OPTIONS", {})["pool"] = {
            "min_size": env_int("DATABASE_POOL_MIN_SIZE", 1),
            "max_size": env_int("DATABASE_POOL_MAX_SIZE", 20),
            "timeout": env_int("DATABASE_POOL_TIMEOUT", 30),
        }
    else:
        _db["CONN_MAX_AGE"] = env_int("CONN_MAX_AGE", 60)
        _db["CONN_HEALTH_CHECKS"] = True
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # Server-side prepared statements: a query run this many times on a connection is
        # prepared, and from then on PostgreSQL neither parses nor (mostly) plans it again.
        # Django turns them off for the sake of poolers in transaction mode; 0 does too.
        _db.setdefault("OPTIONS", {})["prepare_threshold"] = (
            env_int("DATABASE_PREPARE_THRESHOLD", 5) or None
        )
else:
    _db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(VAR_DIR / "db.sqlite3"),
        "OPTIONS": dict(SQLITE_OPTIONS),
    }
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory, so that the live-server tests' web and worker processes share it.
    _db["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "tenants.User"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"

# --- django-allauth: e-mail and password, no open sign-up, TOTP available ------------------
ACCOUNT_ADAPTER = "tenants.adapters.AccountAdapter"
# Keeps the social applications of connection apps off the login page (connections.adapters).
SOCIALACCOUNT_ADAPTER = "connections.adapters.SocialAccountAdapter"
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = False
ACCOUNT_LOGIN_ON_PASSWORD_RESET = False
ACCOUNT_RATE_LIMITS = {"login_failed": "10/m/ip,5/5m/key"}
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = "Countersign"
# Step-up: approving a tool marked risk: high needs a sign-in or re-authentication
# (allauth's, with TOTP when the member has it) at most this many seconds old.
STEP_UP_SECONDS = env_int("STEP_UP_SECONDS", 300)
SOCIALACCOUNT_ONLY = False

# --- E-mail -------------------------------------------------------------------------------
# Development keeps every message in VAR_DIR/outbox/ and shows it at /dev/outbox/
# (config.outbox); a deployment sends by SMTP.
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "config.outbox.OutboxBackend" if DEBUG else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Countersign <countersign@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL

# --- Internationalisation -----------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Static files (whitenoise) ------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Production serves hashed, compressed files after `collectstatic`; development and
    # tests serve the source files as they are.
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
# In development (make run) serve straight from the source folders, no collectstatic needed.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# --- Security (production values when DEBUG is off) ---------------------------------------
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Scripts and styles only from our own files (static/): no inline script, no on* attribute,
# no eval. Images may be data: URIs (allauth's TOTP QR code). No form-action: connecting an
# app posts to us and is redirected to the provider, which form-action would block.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'self'",
        "frame-ancestors 'none'",
    ]
)
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The A2A endpoint is called by programs over plain HTTP in development; the SSL redirect
# must never turn a POST into a GET, so these paths are exempt (TLS is the proxy's job).
SECURE_REDIRECT_EXEMPT = [r"^a2a/", r"^healthz$", r"^readyz$", r"^metrics$"]
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 10 * 1024 * 1024)

# --- REST framework -----------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Bearer first, so that a refused or missing token answers 401 with WWW-Authenticate.
        "tenants.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    # One place maps the core's faults and DRF's refusals to statuses and bodies.
    "EXCEPTION_HANDLER": "approvals.api_errors.rest_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Countersign operator API",
    "DESCRIPTION": "Decision surfaces for Countersign's interactions: list, read and decide "
    "them, decide approval groups, stop tasks, manage standing rules. Programs authenticate "
    "with an operator token (Authorization: Bearer cs_...); a browser with its session.",
    "VERSION": "1",
    # OpenAPI 3.1: its schemas are JSON Schema 2020-12 (null as a type), which the tests use to
    # check the examples and the real responses against them.
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The explorer's Swagger UI from the static files of drf-spectacular-sidecar, never a CDN
    # (the CSP allows scripts from this site only).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two fields are called "kind" (an interaction's, and whoami's credentials kind).
    "ENUM_NAME_OVERRIDES": {
        "InteractionKindEnum": "runtime.decisions.decision_models.Interaction.Kind",
        "InteractionStateEnum": "runtime.decisions.decision_models.Interaction.State",
    },
}

# --- Celery -------------------------------------------------------------------------------
CELERY_BROKER_URL = env_secret("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    _queue_dir = VAR_DIR / "celery" / "queue"
    _processed_dir = VAR_DIR / "celery" / "processed"
    _queue_dir.mkdir(parents=True, exist_ok=True)
    _processed_dir.mkdir(parents=True, exist_ok=True)
    (VAR_DIR / "celery" / "control").mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "processed_folder": str(_processed_dir),
        # kombu's default is ./control, in the source tree; one file per exchange (queue).
        "control_folder": str(VAR_DIR / "celery" / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
if CELERY_BROKER_URL.startswith("redis://"):
    # Kombu's Redis transport with one client per channel instead of one per message.
    CELERY_BROKER_TRANSPORT = "config.broker:Transport"
# Deployments (or test stacks) that share one broker keep their turns apart by queue name.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "celery")
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
# Turns are safe to run twice: acknowledge only when done, and give the message back when
# a worker dies mid-task, so that nothing is lost.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A turn spends its time waiting on a model, an agent URL or a tool server: one worker
# process holds many of them, a thread each, and gives its database connection back to the
# pool while it waits (runtime.turn.claim.db_released); docs/explanation/workers.md has the
# measurements.
# 500: all of bench/slow_turns.py's 500 turns wait on their model at once (200 took three
# waves); an idle thread costs nothing until a message needs it. SQLite (the embedded
# default) takes one writer at a time: a few threads are enough there.
CELERY_WORKER_POOL = env_str("CELERY_WORKER_POOL", "threads")
CELERY_WORKER_CONCURRENCY = env_int(
    "CELERY_WORKER_CONCURRENCY", 8 if _db["ENGINE"] == "django.db.backends.sqlite3" else 500
)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 600)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 540)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- Countersign --------------------------------------------------------------------------
# How long a blocking SendMessage waits for a terminal or interrupted state (profile v2).
A2A_WAIT_MS = env_int("A2A_WAIT_MS", 300_000)
# The documented default demo password; seed_demo refuses it when DEBUG is off.
DEMO_OPERATOR_PASSWORD_DEFAULT = "countersign-demo"
# Empty (as in a .env copied from .env.example) means the default, never an empty password.
DEMO_OPERATOR_PASSWORD = env_secret("DEMO_OPERATOR_PASSWORD") or DEMO_OPERATOR_PASSWORD_DEFAULT

# The keys that encrypt stored secrets at rest (connections/crypto.py: Fernet, key derived by
# HKDF). Any long random strings, comma-separated: the first encrypts, all decrypt, so a new
# key goes first and `manage.py rotate_secrets` re-encrypts everything under it before the
# old one is dropped. Defaults to SECRET_KEY, then its fallbacks (so that a rotated
# SECRET_KEY still reads what the old one encrypted until rotate_secrets has run); set it on
# its own in production. SECRET_KEY is one key as it is (it may hold a comma).
CONNECTIONS_ENCRYPTION_KEY = [
    key.strip() for key in env_secret("CONNECTIONS_ENCRYPTION_KEY").split(",") if key.strip()
] or [SECRET_KEY, *SECRET_KEY_FALLBACKS]
# How long an operator has to finish an OAuth2 connect at the provider, in seconds.
CONNECTIONS_OAUTH_STATE_TTL = env_int("CONNECTIONS_OAUTH_STATE_TTL", 600)

# --- Logging: every line names the task, tenant and subject it is about -------------------
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
# One line per HTTP request (uvicorn's access log, in LOG_FORMAT), off by default.
ACCESS_LOG = env_bool("ACCESS_LOG", False)
# "text" (key=value) or "json"; JSON by default in production (DEBUG off).
LOG_FORMAT = env_str("LOG_FORMAT", "text" if DEBUG else "json")
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, not {LOG_FORMAT!r}")
# Chatter that says nothing about a task: beat's "Sending due task" every sweep, and each
# periodic task's "received" and "succeeded" lines. LOG_LEVEL=DEBUG shows them again.
_QUIET_LEVEL = "DEBUG" if LOG_LEVEL == "DEBUG" else "WARNING"
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "context": {"()": "config.logging.ContextFilter"},
        "forbidden_one_line": {"()": "config.logging.ForbiddenOneLine"},
        "link_tokens": {"()": "config.logging.LinkTokenMask"},
    },
    "formatters": {
        "text": {
            # One line per record: control characters in a value are written escaped.
            "()": "config.logging.TextFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s [%(process)d] "
            "task=%(task_id)s tenant=%(tenant)s subject=%(subject)s trace=%(trace_id)s %(message)s",
        },
        "json": {"()": "config.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context", "link_tokens"],
            "formatter": "json" if LOG_FORMAT == "json" else "text",
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's defaults give "django" a handler of its own, which printed every
        # django.request warning twice (there and at the root): one handler, the root's.
        "django": {"handlers": [], "level": LOG_LEVEL, "propagate": True},
        # The loggers that print a request's path mask e-mail link tokens themselves too
        # (config.logging.LinkTokenMask), whatever handler a server gives them.
        "django.request": {"filters": ["forbidden_one_line", "link_tokens"], "propagate": True},
        "django.security.csrf": {"filters": ["link_tokens"], "propagate": True},
        "django.server": {
            "handlers": [],
            "level": LOG_LEVEL,
            "filters": ["link_tokens"],
            "propagate": True,
        },
        "django.db.backends": {"level": "INFO"},
        # uvicorn's own lines, in our format (JSON in production) rather than its own.
        "uvicorn": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False},
        "uvicorn.error": {"handlers": [], "propagate": True},
        # uvicorn's access log (one line per request, its path included) is off unless
        # ACCESS_LOG: this configuration takes the handler uvicorn (or gunicorn's
        # UvicornWorker) gave it, and it does not propagate. On, it is written in our format
        # through the console handler, e-mail link tokens masked.
        "uvicorn.access": {
            "handlers": [],
            "level": LOG_LEVEL,
            "filters": ["link_tokens"],
            "propagate": ACCESS_LOG,
        },
        "celery": {"level": LOG_LEVEL},
        # The mcp package (the MCP gateway's server, tool servers' clients) says "Processing
        # request of type ..." for every request and every session it opens or ends: an
        # access log of its own. Its warnings and errors still reach ours.
        "mcp": {"level": "WARNING"},
        "celery.beat": {"level": _QUIET_LEVEL},
        "celery.app.trace": {"level": _QUIET_LEVEL},
        "celery.worker.strategy": {"level": _QUIET_LEVEL},
        # "celery@host ready.": scripts/run.py prints its banner after it.
        "celery.apps.worker": {"level": "INFO"},
        # httpx logs every request at INFO (a model call, a push, a tool call): a line and
        # the logging lock per call across a worker's threads; its warnings still show.
        "httpx": {"level": "WARNING"},
    },
}
if CELERY_BROKER_URL == "filesystem://":
    # The filesystem transport has no host; kombu warns "No hostname was supplied" at every
    # connection it makes.
    LOGGING["loggers"]["kombu.connection"] = {"level": "ERROR"}
# Under ASGI, whitenoise's static files are a synchronous iterator, which Django consumes in
# a thread and warns about on every file (whitenoise has no async iterator yet).
warnings.filterwarnings(
    "ignore", message="StreamingHttpResponse must consume synchronous iterators"
)

# --- The turn runtime ---------------------------------------------------------------------
# A turn's lease: a worker renews it at every step; when it runs out (the worker died) the
# sweep gives the turn to another worker, which continues from the stored transcript.
TURN_LEASE_SECONDS = env_int("TURN_LEASE_SECONDS", 60)
TURN_SWEEP_SECONDS = env_int("TURN_SWEEP_SECONDS", 15)
# On a redis:// broker, a turn starts from a Redis list that each worker process pops
# (runtime.turn.consumer), not as a Celery message: a third less worker CPU per turn. Web
# processes and workers must agree (a turn pushed where no worker pops waits for the sweep).
TURN_CONSUMER = env_bool("TURN_CONSUMER", True)
# How long one wait on the network (a model or tool call) may keep its lease alive. The
# threads pool cannot enforce Celery's time limits; past this the sweep takes the turn back.
TURN_HOLD_MAX_SECONDS = env_int("TURN_HOLD_MAX_SECONDS", CELERY_TASK_TIME_LIMIT)
# How long a tool server's question to a person (MCP elicitation) may keep its call open: the
# worker waits that long for an answer, then tells the server "cancel". Below the Celery soft
# time limit, which bounds the whole run on a prefork pool.
MCP_ELICITATION_TIMEOUT_SECONDS = env_int("MCP_ELICITATION_TIMEOUT_SECONDS", 300)
# How many runs of a turn may crash (or lose their worker) before it fails for good; an error
# that can never succeed (data the database refuses, say) fails it at once (runtime.turn.outcomes).
TURN_MAX_ATTEMPTS = env_int("TURN_MAX_ATTEMPTS", 3)

# What model tokens cost, USD per million (input, output), for telemetry/v1's costUsd
# (runtime.llm.prices). Admins may override a model's price in Django admin.
MODEL_PRICES = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
}
# Credentials (AGENT.md's model.credential) that may come from the environment when the
# tenant has none of that name in admin (runtime.llm.credentials): single-tenant installs.
CREDENTIAL_ENV_NAMES = env_list("CREDENTIAL_ENV_NAMES", ["OPENAI_API_KEY"])
# provider: openai (runtime.llm.openai_chat). OPENAI_BASE_URL is the installer's, so trusted
# (it may be loopback: a model server on this host); a tenant's model.base_url goes through
# the outbound guard. A 429, 5xx, timeout or lost connection is retried MODEL_MAX_ATTEMPTS
# times in all, with exponential backoff from MODEL_RETRY_BASE_SECONDS (or Retry-After).
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL", "")
MODEL_TIMEOUT_SECONDS = env_int("MODEL_TIMEOUT_SECONDS", 120)
# The largest reply of a hosted model and of an HTTP agent (provider: http) read, in bytes.
MODEL_REPLY_MAX_BYTES = env_int("MODEL_REPLY_MAX_BYTES", 4 * 1024 * 1024)
AGENT_REPLY_MAX_BYTES = env_int("AGENT_REPLY_MAX_BYTES", 1024 * 1024)
MODEL_MAX_ATTEMPTS = env_int("MODEL_MAX_ATTEMPTS", 5)
MODEL_RETRY_BASE_SECONDS = env_int("MODEL_RETRY_BASE_SECONDS", 1)
INTERACTION_EXPIRY_SWEEP_SECONDS = env_int("INTERACTION_EXPIRY_SWEEP_SECONDS", 60)
# How much operators may extend an open item's deadline in all (runtime.decisions.deadlines).
INTERACTION_EXTEND_MAX_SECONDS = env_int("INTERACTION_EXTEND_MAX_SECONDS", 24 * 3600)
# Threads that run the A2A endpoint's database calls and token-authenticated /api/v1/ requests
# (approvals.lean_api), shared by all callers of a process.
A2A_DB_THREADS = env_int("A2A_DB_THREADS", 8)
# New messages (SendMessage, SendStreamingMessage) taken in at once per web process; the
# others wait their turn before anything of theirs is parsed or queued for those threads, so
# that a burst of new calls does not hold up the answers of callers whose tasks have settled
# (bench/waiters.py). Twice the threads keeps the threads busy.
A2A_INTAKE_CONCURRENCY = env_int("A2A_INTAKE_CONCURRENCY", 2 * A2A_DB_THREADS)
# Connections of the A2A endpoint's async pool per web process (PostgreSQL): GetTask's read.
A2A_DB_ASYNC_POOL_SIZE = env_int("A2A_DB_ASYNC_POOL_SIZE", 10)
# The largest JSON-RPC request body the A2A endpoint reads.
A2A_MAX_BODY_BYTES = env_int("A2A_MAX_BODY_BYTES", 4 * 1024 * 1024)
# SSE streams (SendStreamingMessage, SubscribeToTask): a keep-alive comment this often, and
# at most this many open streams per process and per token (a2a_endpoint.streams).
A2A_STREAM_KEEPALIVE_SECONDS = env_int("A2A_STREAM_KEEPALIVE_SECONDS", 15)
A2A_STREAMS_PER_PROCESS = env_int("A2A_STREAMS_PER_PROCESS", 2000)
A2A_STREAMS_PER_TOKEN = env_int("A2A_STREAMS_PER_TOKEN", 100)
# How long one write of a stream may wait for its client to read (the connection's buffers
# are full) before the stream is ended and the connection dropped.
A2A_STREAM_WRITE_TIMEOUT_SECONDS = env_int("A2A_STREAM_WRITE_TIMEOUT_SECONDS", 30)
# How long a streamed send holds its first event while the turn has only started, so that a
# direct reply can still be sent as a Message (a stream is one Message or a Task's events).
A2A_STREAM_FIRST_EVENT_MS = env_int("A2A_STREAM_FIRST_EVENT_MS", 1000)
# Live output (PostgreSQL): a turn whose message came on a stream has its hosted model stream
# the reply, and the text reaches the task's streams as it is written, sent at most once per
# interval per worker process (runtime.turn.live_output). Off: models are never asked to
# stream, and streams get the final reply only.
LIVE_OUTPUT = env_bool("LIVE_OUTPUT", True)
LIVE_OUTPUT_INTERVAL_MS = env_int("LIVE_OUTPUT_INTERVAL_MS", 100)
CELERY_BEAT_SCHEDULE = {
    "sweep-turns": {"task": "runtime.tasks.sweep_turns", "schedule": float(TURN_SWEEP_SECONDS)},
    "expire-interactions": {
        "task": "runtime.tasks.expire_interactions",
        "schedule": float(INTERACTION_EXPIRY_SWEEP_SECONDS),
    },
    # Audit rows past each tenant's retention (runtime.kernel.audit_prune): retention is
    # counted in days, so once a day is enough; a tenant without one is never pruned.
    "prune-audit": {"task": "runtime.tasks.prune_audit", "schedule": 24 * 3600.0},
}

# Every outbound request (connections.outbound's guarded clients) ends within its caller's
# timeout in all (connect, send, the headers and every read of the body together: a server
# that trickles is cut off at it), and reads at most this much body unless its caller has a
# limit of its own (PUSH_REPLY_MAX_BYTES, FILES_FETCH_MAX_BYTES, TOOL_*_MAX_BYTES, MODEL_...).
OUTBOUND_MAX_RESPONSE_BYTES = env_int("OUTBOUND_MAX_RESPONSE_BYTES", 1024 * 1024)
# Tenants' tool servers (runtime.tools.servers): the largest answer to a call, and to a
# discovery (tools/list, list_tools), read.
TOOL_RESULT_MAX_BYTES = env_int("TOOL_RESULT_MAX_BYTES", 10 * 1024 * 1024)
TOOL_LIST_MAX_BYTES = env_int("TOOL_LIST_MAX_BYTES", 4 * 1024 * 1024)

# Push notifications and outbound fetches (runtime.kernel.push.push_configs, runtime.kernel.push.push_delivery, connections.outbound).
# Loopback and private addresses are refused unless this is on (local development, the TCK).
PUSH_ALLOW_PRIVATE_HOSTS = env_bool("PUSH_ALLOW_PRIVATE_HOSTS", False)
PUSH_TIMEOUT_SECONDS = env_int("PUSH_TIMEOUT_SECONDS", 10)
# Of a receiver's reply only the status counts: at most this much of its body is read.
PUSH_REPLY_MAX_BYTES = env_int("PUSH_REPLY_MAX_BYTES", 64 * 1024)
PUSH_RETRY_HOURS = env_int("PUSH_RETRY_HOURS", 24)
PUSH_MAX_CONCURRENCY_PER_RECEIVER = env_int("PUSH_MAX_CONCURRENCY_PER_RECEIVER", 4)
PUSH_SECRET_GRACE_HOURS = env_int("PUSH_SECRET_GRACE_HOURS", 24)
PUSH_SWEEP_SECONDS = env_int("PUSH_SWEEP_SECONDS", 30)
CELERY_BEAT_SCHEDULE["sweep-push"] = {
    "task": "runtime.tasks.sweep_push",
    "schedule": float(PUSH_SWEEP_SECONDS),
}
# files/v1: signed download links, incoming url parts, raw part size.
FILES_URL_TTL_SECONDS = env_int("FILES_URL_TTL_SECONDS", 3600)
FILES_FETCH_MAX_BYTES = env_int("FILES_FETCH_MAX_BYTES", 10 * 1024 * 1024)
FILES_FETCH_TIMEOUT_SECONDS = env_int("FILES_FETCH_TIMEOUT_SECONDS", 15)
# Hosts the worker may fetch a caller's url parts from (patterns as for push); loopback and
# private addresses are refused unless PUSH_ALLOW_PRIVATE_HOSTS is on.
FILES_FETCH_ALLOWED_HOSTS = env_list("FILES_FETCH_ALLOWED_HOSTS", ["*"])
# Media types a fetched url part may have: exact types or major/*.
FILES_FETCH_MEDIA_TYPES = env_list(
    "FILES_FETCH_MEDIA_TYPES",
    ["text/*", "application/json", "application/pdf", "application/xml", "image/*"],
)
A2A_MAX_RAW_PART_BYTES = env_int("A2A_MAX_RAW_PART_BYTES", 1024 * 1024)
# How many url parts one message may carry (the worker fetches each before the turn starts).
A2A_MAX_URL_PARTS = env_int("A2A_MAX_URL_PARTS", 10)
PUSH_RETRY_BASE_SECONDS = float(env_str("PUSH_RETRY_BASE_SECONDS", "1"))

# --- Operations: /metrics and tracing (config.metrics, config.tracing) ---------------------
# The bearer token /metrics asks for; unset, /metrics answers 404. PROMETHEUS_MULTIPROC_DIR
# (read by prometheus_client itself) makes the web processes serve the workers' counters.
METRICS_TOKEN = env_secret("METRICS_TOKEN")

# Notifications to operators (notifications/): channels, reminders and escalation, digests.
# Links in notifications point at PUBLIC_BASE_URL, else this, else where the server listens
# (LISTEN_URL).
NOTIFY_BASE_URL = env_str("NOTIFY_BASE_URL").rstrip("/")
NOTIFY_TIMEOUT_SECONDS = env_int("NOTIFY_TIMEOUT_SECONDS", 10)
NOTIFY_MAX_ATTEMPTS = env_int("NOTIFY_MAX_ATTEMPTS", 8)
NOTIFY_RETRY_BASE_SECONDS = float(env_str("NOTIFY_RETRY_BASE_SECONDS", "30"))
NOTIFY_SWEEP_SECONDS = env_int("NOTIFY_SWEEP_SECONDS", 30)
# An open interaction whose notifications have not been fanned out after this long (its
# message was lost) is fanned out by the sweep; a late first message then sends nothing twice.
NOTIFY_FAN_OUT_GRACE_SECONDS = env_int("NOTIFY_FAN_OUT_GRACE_SECONDS", 120)
# How far back the sweep looks for decisions, expiries and voids whose follow-up (the
# channels told what became of an item) never ran; older ones are left alone.
NOTIFY_FOLLOW_UP_SWEEP_HOURS = env_int("NOTIFY_FOLLOW_UP_SWEEP_HOURS", 24)
# The tenant's Slack app (integrations/): where Slack's Web API is (tests and private installs
# point elsewhere), how long a call may take (a modal's, while Slack waits for the click's
# answer, less), and how long what Slack said of a user (their confirmed e-mail) is kept.
SLACK_API_URL = env_str("SLACK_API_URL", "https://slack.com/api/")
SLACK_TIMEOUT_SECONDS = env_int("SLACK_TIMEOUT_SECONDS", 10)
SLACK_MODAL_TIMEOUT_SECONDS = env_int("SLACK_MODAL_TIMEOUT_SECONDS", 2)
SLACK_USER_CACHE_SECONDS = env_int("SLACK_USER_CACHE_SECONDS", 3600)
# Socket Mode (integrations.slack.socket_mode): a worker holds a connection to Slack for each
# tenant's Slack app that has an app-level token, and looks this often for apps whose token
# was set, changed or removed. Off: this worker opens none (another does).
SLACK_SOCKET_MODE = env_bool("SLACK_SOCKET_MODE", True)
SLACK_SOCKET_SYNC_SECONDS = env_int("SLACK_SOCKET_SYNC_SECONDS", 30)
CELERY_BEAT_SCHEDULE.update(
    {
        "sweep-notifications": {
            "task": "notifications.tasks.sweep_notifications",
            "schedule": float(NOTIFY_SWEEP_SECONDS),
        },
        "sweep-fan-outs": {
            "task": "notifications.tasks.sweep_fan_outs",
            "schedule": float(NOTIFY_SWEEP_SECONDS),
        },
        "sweep-follow-ups": {
            "task": "notifications.tasks.sweep_follow_ups",
            "schedule": float(NOTIFY_SWEEP_SECONDS),
        },
        "advance-ladders": {
            "task": "notifications.tasks.advance_ladders",
            "schedule": float(NOTIFY_SWEEP_SECONDS),
        },
        "send-digests": {
            "task": "notifications.tasks.send_digests",
            "schedule": 60.0,
        },
    }
)
