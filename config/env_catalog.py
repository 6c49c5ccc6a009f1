"""Every environment variable Countersign reads, with what it means: the one source of the
settings reference (docs/reference/settings.md), of `.env.example` (development) and of
`deploy/production.env.example`, which scripts/docs_reference.py writes from it.

What a variable defaults to is not written here but read from the code that reads it (the
``env_*`` call's second argument), so the pages cannot disagree with it. Only where that
default is an expression (``not DEBUG``, ``2 * A2A_DB_THREADS``) or differs between readers
does a row say it in words. tests/test_env_catalog.py fails when a variable is read and not
listed here, when one listed here is read nowhere, and when the written files are stale.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Setting:
    """One row of the reference: one variable, or a few that belong together."""

    names: tuple[str, ...]
    meaning: str  # Markdown, one sentence or a few, as the reference's table cell shows it
    # The default in words, for a row where some variable's default is an expression or
    # differs between its readers; every literal default of the row must appear in it.
    default: str = ""
    # What a commented line of .env.example shows for a variable whose default is no literal.
    example: dict[str, str] = field(default_factory=dict)
    # The value deploy/production.env.example sets (uncommented) for a variable; "" sets it
    # empty, which the file's comment says to fill in.
    production: dict[str, str] = field(default_factory=dict)
    # Who reads the variable when no code of Countersign's reads it by name (a library, or a
    # credential looked up by its name).
    read_by: str = ""


@dataclass(frozen=True)
class Group:
    title: str
    about: str
    settings: tuple[Setting, ...]


GROUPS: tuple[Group, ...] = (
    Group(
        "Reading the environment",
        "Where the values come from.",
        (
            Setting(
                ("ENV_FILE",),
                "the `NAME=value` file read at start (`export`, `#` comments and quotes allowed: "
                '`X="a b" # note` is `a b`; `"..."` takes `\\"` and `\\\\`); empty: read none',
                default="`.env` beside `manage.py`",
                example={"ENV_FILE": ".env"},
            ),
        ),
    ),
    Group(
        "Site, hosts and secrets",
        "What every deployment sets first.",
        (
            Setting(
                ("DEBUG",),
                "development mode; set `false` in production",
                default="on (`true`), development mode",
                example={"DEBUG": "true"},
                production={"DEBUG": "false"},
            ),
            Setting(
                ("SECRET_KEY",),
                "signs sessions and links; required when `DEBUG=false`",
                default="generated into `var/` (debug only)",
                production={"SECRET_KEY": ""},
            ),
            Setting(
                ("SECRET_KEY_FALLBACKS",),
                "earlier `SECRET_KEY`s, comma-separated, still accepted for what they signed "
                "(sessions, invitation and file links) while a new `SECRET_KEY` takes over "
                "([Rotate keys](../how-to/rotate-keys.md))",
            ),
            Setting(
                ("ALLOWED_HOSTS",),
                "comma-separated host names",
                default="localhost names when `DEBUG` is on, else none",
                example={"ALLOWED_HOSTS": "localhost,127.0.0.1"},
                production={"ALLOWED_HOSTS": "countersign.example.com"},
            ),
            Setting(
                ("CSRF_TRUSTED_ORIGINS",),
                "`https://host` origins allowed to post forms, comma-separated",
                production={"CSRF_TRUSTED_ORIGINS": "https://countersign.example.com"},
            ),
            Setting(
                ("PUBLIC_BASE_URL",),
                "base URL written into agent cards, and into every link of e-mails, Slack messages "
                "and invitations (unset: agent cards from the request, links `http://HOST:PORT`, "
                "the address the banner prints, so one host and one session cookie everywhere)",
                production={"PUBLIC_BASE_URL": "https://countersign.example.com"},
            ),
            Setting(
                ("INVITATION_LINK_DAYS",),
                "days a member's invitation link (it sets their password) works; it works "
                "once, and resending makes a new one",
            ),
            Setting(("TIME_ZONE",), "the time zone of pages and e-mails"),
            Setting(
                ("CONNECTIONS_ENCRYPTION_KEY",),
                "keys (comma-separated) that encrypt stored secrets at rest: connection tokens, "
                "push config tokens and signing secrets, model credentials (Fernet, keys derived "
                "by HKDF). The first encrypts, all decrypt; to rotate, put a new key first, "
                "restart, run `python manage.py rotate_secrets` (then `rotate_secrets --check`), "
                "and drop the old key. Set it apart from `SECRET_KEY`",
                default="`SECRET_KEY`, then `SECRET_KEY_FALLBACKS`",
                production={"CONNECTIONS_ENCRYPTION_KEY": ""},
            ),
            Setting(
                ("RECEIPT_KEY_CACHE_SECONDS",),
                "seconds a process keeps the receipt signing key it loaded; after "
                "`rotate_secrets --signing-key` other processes sign with the new key within "
                "this time (the old key stays published, so their receipts still verify)",
            ),
            Setting(
                ("CONNECTIONS_OAUTH_STATE_TTL",),
                "seconds an operator has to finish an OAuth2 connect at the provider",
            ),
            Setting(
                ("STEP_UP_SECONDS",),
                "how recent a sign-in or re-authentication (password, and TOTP when the member "
                "has it) must be to approve a tool marked `risk: high`",
            ),
            Setting(
                ("DEMO_OPERATOR_PASSWORD",),
                "password of the demo logins (`seed_demo`); empty: the default, which is "
                "refused when `DEBUG=false`",
                default="`countersign-demo` (refused when `DEBUG=false`)",
            ),
            Setting(
                ("VAR_DIR",),
                "where the embedded default keeps its files (SQLite database, queue, "
                "development secret)",
                default="`var/` beside `manage.py`",
                example={"VAR_DIR": "./var"},
            ),
            Setting(
                ("DATA_UPLOAD_MAX_MEMORY_SIZE",),
                "the largest form or REST request body Django reads, in bytes",
            ),
        ),
    ),
    Group(
        "HTTPS",
        "Behind a TLS proxy ([Run behind nginx or Caddy](../how-to/reverse-proxy.md)).",
        (
            Setting(
                (
                    "SECURE_SSL_REDIRECT",
                    "SECURE_HSTS_SECONDS",
                    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
                    "SECURE_HSTS_PRELOAD",
                    "SESSION_COOKIE_SECURE",
                    "CSRF_COOKIE_SECURE",
                ),
                "HTTPS hardening: redirect plain HTTP (the A2A endpoint and the probes are "
                "exempt), HSTS, secure cookies",
                default="each on (HSTS a year, 31536000 seconds) when `DEBUG=false`; off (0) "
                "when `DEBUG` is on",
                example={
                    "SECURE_SSL_REDIRECT": "false",
                    "SECURE_HSTS_SECONDS": "0",
                    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "false",
                    "SECURE_HSTS_PRELOAD": "false",
                    "SESSION_COOKIE_SECURE": "false",
                    "CSRF_COOKIE_SECURE": "false",
                },
                # The default without DEBUG already; said here because compose.yaml turns it
                # off unless told (its http://localhost:8000 works without a proxy).
                production={"SECURE_SSL_REDIRECT": "true"},
            ),
            Setting(
                ("SECURE_PROXY_SSL_HEADER",),
                "trust `X-Forwarded-Proto` from your proxy (set it only behind one that sets "
                "the header on every request)",
                production={"SECURE_PROXY_SSL_HEADER": "true"},
            ),
        ),
    ),
    Group(
        "Database",
        "PostgreSQL in production; SQLite is the embedded default.",
        (
            Setting(
                ("DATABASE_URL",),
                "`postgres://user:pass@host:5432/db` (psycopg 3)",
                default="SQLite `var/db.sqlite3`",
                example={"DATABASE_URL": "postgres://countersign@127.0.0.1:5432/countersign"},
                production={"DATABASE_URL": "postgres://countersign@127.0.0.1:5432/countersign"},
            ),
            Setting(
                (
                    "DATABASE_POOL",
                    "DATABASE_POOL_MIN_SIZE",
                    "DATABASE_POOL_MAX_SIZE",
                    "DATABASE_POOL_TIMEOUT",
                ),
                "psycopg's connection pool for PostgreSQL (sizes per process; seconds to wait "
                "for a connection)",
            ),
            Setting(
                ("DATABASE_PREPARE_THRESHOLD",),
                "PostgreSQL: a query run this many times on a connection becomes a server-side "
                "prepared statement (default 5); `0` turns them off, for a pooler in transaction "
                "mode that cannot keep them",
            ),
            Setting(
                ("CONN_MAX_AGE",),
                "seconds a database connection is reused when there is no pool (SQLite, or "
                "`DATABASE_POOL=false`)",
            ),
        ),
    ),
    Group(
        "Broker, workers and turns",
        "Celery and the turn runtime ([Workers](../explanation/workers.md)).",
        (
            Setting(
                ("CELERY_BROKER_URL",),
                "`redis://…` or `amqp://…`; unset: `filesystem://` under `var/`",
                example={"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"},
                production={"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"},
            ),
            Setting(
                ("CELERY_QUEUE",),
                "the queue turns are published to and workers consume; deployments that share "
                "a broker use one each",
            ),
            Setting(
                ("CELERY_TASK_TIME_LIMIT", "CELERY_TASK_SOFT_TIME_LIMIT"),
                "seconds one task (a turn's step) may run before it is stopped (hard) or told "
                "to stop (soft)",
            ),
            Setting(
                ("CELERY_WORKER_POOL", "CELERY_WORKER_CONCURRENCY"),
                "the worker's pool and how many turns one process runs at once "
                "([Workers](../explanation/workers.md))",
                default="`threads`, `500` (`8` on SQLite)",
                example={"CELERY_WORKER_CONCURRENCY": "500"},
            ),
            Setting(
                ("TURN_LEASE_SECONDS",),
                "a turn's lease: when a worker stops renewing it (it died), the sweep gives the "
                "turn to another worker",
            ),
            Setting(
                ("TURN_SWEEP_SECONDS",), "seconds between sweeps for turns whose lease ran out"
            ),
            Setting(
                ("TURN_CONSUMER",),
                "on a `redis://` broker, turns start from a Redis list each worker pops "
                "instead of as Celery messages (a third less worker CPU per turn); web "
                "processes and workers must agree "
                "([Workers](../explanation/workers.md))",
            ),
            Setting(
                ("TURN_MAX_ATTEMPTS",),
                "how many runs of one turn may crash or lose their worker before the turn "
                "fails, saying why on the task (an error that can never succeed, such as data "
                "the database refuses, fails it at once); a turn resumed by a decision starts "
                "afresh",
            ),
            Setting(
                ("TURN_HOLD_MAX_SECONDS",),
                "how long one model or tool call may keep its turn's lease",
                default="`CELERY_TASK_TIME_LIMIT` (600)",
                example={"TURN_HOLD_MAX_SECONDS": "600"},
            ),
            Setting(
                ("INTERACTION_EXPIRY_SWEEP_SECONDS",),
                "seconds between sweeps that expire interactions past their `expiresAt`",
            ),
            Setting(
                ("INTERACTION_EXTEND_MAX_SECONDS",),
                "how much operators may extend an open item's deadline in all, over its life "
                "(`POST /api/v1/interactions/<id>/extend`)",
            ),
            Setting(
                ("MCP_ELICITATION_TIMEOUT_SECONDS",),
                "how long a tool server's question to a person (MCP elicitation) keeps its call "
                "open before the server is told `cancel` ([Tool servers](tool-servers.md))",
            ),
        ),
    ),
    Group(
        "The A2A endpoint and its streams",
        "What callers of the agents may send, and how long they wait ([A2A](a2a.md)).",
        (
            Setting(("A2A_WAIT_MS",), "how long a blocking `SendMessage` waits, in milliseconds"),
            Setting(
                ("A2A_DB_THREADS",),
                "threads per web process that run the A2A endpoint's database calls and the "
                "token-authenticated `/api/v1/` requests (shared by all their callers)",
            ),
            Setting(
                ("A2A_INTAKE_CONCURRENCY",),
                "new messages (SendMessage, SendStreamingMessage) a web process takes in at "
                "once; the rest of a burst waits its turn, so that callers whose tasks have "
                "settled get their answers first (`bench/waiters.py`)",
                default="`2 × A2A_DB_THREADS` (16)",
                example={"A2A_INTAKE_CONCURRENCY": "16"},
            ),
            Setting(
                ("A2A_DB_ASYNC_POOL_SIZE",),
                "connections of the A2A endpoint's async pool per web process (PostgreSQL): the "
                "reads of GetTask, ListTasks and a blocking SendMessage's wait",
            ),
            Setting(
                ("A2A_MAX_BODY_BYTES",),
                "the largest JSON-RPC request body the endpoint reads",
            ),
            Setting(
                ("A2A_MAX_RAW_PART_BYTES",),
                "the largest raw part a `SendMessage` may carry (`-32602` above it)",
            ),
            Setting(
                ("A2A_MAX_URL_PARTS",),
                "how many url parts one `SendMessage` may carry (`-32602` above it); the worker "
                "fetches each",
            ),
            Setting(
                ("A2A_STREAM_KEEPALIVE_SECONDS",),
                "how often an idle stream gets a `: keep-alive` comment",
            ),
            Setting(
                ("A2A_STREAMS_PER_TOKEN", "A2A_STREAMS_PER_PROCESS"),
                "open streams allowed per caller (a token's subject; callers without a token, "
                "per address) and per web process",
            ),
            Setting(
                ("A2A_STREAM_WRITE_TIMEOUT_SECONDS",),
                "how long one write of a stream waits for its client to read; then the stream "
                "ends and the connection is dropped (a client that never reads holds nothing)",
            ),
            Setting(
                ("A2A_STREAM_FIRST_EVENT_MS",),
                "how long a streamed send waits for a direct reply before it sends the Task",
            ),
            Setting(
                ("LIVE_OUTPUT",),
                "live output (PostgreSQL): a turn whose message came on a stream has its hosted "
                "model stream the reply, and the text reaches the task's streams as it is "
                "written ([Live output](a2a.md)); `false`: models are never asked to stream",
            ),
            Setting(
                ("LIVE_OUTPUT_INTERVAL_MS",),
                "the worker sends live text at most this often (what comes meanwhile goes out "
                "together)",
            ),
        ),
    ),
    Group(
        "Files, push and outbound requests",
        "Every outbound request goes through one guarded client ([Security](../explanation/"
        "security.md)).",
        (
            Setting(
                ("FILES_URL_TTL_SECONDS",),
                "how long a signed file download link is valid (files/v1); GetTask hands out "
                "fresh ones",
            ),
            Setting(
                ("FILES_FETCH_MAX_BYTES",),
                "the largest file a caller's url part may point at",
            ),
            Setting(
                ("FILES_FETCH_TIMEOUT_SECONDS",),
                "how long the worker waits for a url part's file in all (connect to last byte)",
            ),
            Setting(
                ("FILES_FETCH_ALLOWED_HOSTS",),
                "hosts url parts may be fetched from (`example.com`, `*.example.com`, `*` = any "
                "public host), comma-separated",
            ),
            Setting(
                ("FILES_FETCH_MEDIA_TYPES",),
                "media types a fetched url part may have (exact, or `major/*`), comma-separated",
            ),
            Setting(
                ("PUSH_ALLOW_PRIVATE_HOSTS",),
                "let push deliveries, url-part fetches and other outbound requests reach "
                "loopback and private addresses (development, the TCK)",
            ),
            Setting(
                ("PUSH_TIMEOUT_SECONDS",),
                "how long one push delivery attempt may take in all (connect, send, the reply "
                "read to its end: a receiver that trickles is cut off at it)",
            ),
            Setting(
                ("PUSH_REPLY_MAX_BYTES",),
                "the most of a push receiver's reply read (only its status counts); a larger "
                "one is a failed attempt, retried",
            ),
            Setting(
                ("PUSH_RETRY_HOURS",),
                "how long a push delivery is retried before it is given up",
            ),
            Setting(
                ("PUSH_RETRY_BASE_SECONDS",),
                "base of the exponential backoff between push retries",
            ),
            Setting(
                ("PUSH_MAX_CONCURRENCY_PER_RECEIVER",),
                "push deliveries in flight at once to one receiver (host:port)",
            ),
            Setting(
                ("PUSH_SECRET_GRACE_HOURS",),
                "how long the previous push signing secret stays valid after a rotation",
            ),
            Setting(("PUSH_SWEEP_SECONDS",), "seconds between sweeps for due push deliveries"),
            Setting(
                ("TOOL_RESULT_MAX_BYTES", "TOOL_LIST_MAX_BYTES"),
                "the largest answer read of a tenant's tool server to a call (a larger one is "
                "the call's tool error), and to a discovery (the refresh fails, the cache is "
                "kept)",
            ),
            Setting(
                ("OUTBOUND_MAX_RESPONSE_BYTES",),
                "the largest response body read by any other outbound request (notifications, "
                "OAuth2); every outbound request also ends within its caller's timeout in all",
            ),
        ),
    ),
    Group(
        "Models",
        "Hosted models ([Model providers](model-providers.md)).",
        (
            Setting(
                ("OPENAI_API_KEY",),
                "turns on the demo's `assistant` agent ([A real model in the demo]"
                "(../tutorials/walkthrough.md#a-real-model-in-the-demo)); also the single-tenant "
                "default for agents whose `model.credential` is `OPENAI_API_KEY`",
                read_by="`runtime.llm.credentials`, as a credential named in "
                "`CREDENTIAL_ENV_NAMES`, and `seed_demo`",
            ),
            Setting(
                ("OPENAI_BASE_URL",),
                "an OpenAI-compatible server for `provider: openai` (Ollama, vLLM, LiteLLM...); "
                "installer's configuration, so loopback is allowed (unset: OpenAI's)",
            ),
            Setting(
                ("OPENAI_MODEL",),
                "the demo assistant's model (unset: `gpt-4o-mini`)",
            ),
            Setting(
                ("MODEL_TIMEOUT_SECONDS", "MODEL_MAX_ATTEMPTS", "MODEL_RETRY_BASE_SECONDS"),
                "how long one model call may take in all (connect to the reply's last byte); "
                "attempts of one call (429, 5xx, timeouts) before the task fails; the base of "
                "the exponential backoff between them",
            ),
            Setting(
                ("MODEL_REPLY_MAX_BYTES", "AGENT_REPLY_MAX_BYTES"),
                "the largest reply read of a hosted model, and of an agent over HTTP "
                "(`provider: http`); a larger one fails the task, not retried",
            ),
            Setting(
                ("CREDENTIAL_ENV_NAMES",),
                "the credential names that may come from the environment when a tenant has not "
                "set its own in admin (comma-separated; empty: none)",
            ),
        ),
    ),
    Group(
        "E-mail and notifications",
        "How a pause finds a person ([Notification channels](../how-to/channels.md)).",
        (
            Setting(
                (
                    "EMAIL_BACKEND",
                    "EMAIL_HOST",
                    "EMAIL_PORT",
                    "EMAIL_HOST_USER",
                    "EMAIL_HOST_PASSWORD",
                    "EMAIL_USE_TLS",
                    "EMAIL_USE_SSL",
                    "DEFAULT_FROM_EMAIL",
                ),
                "outgoing mail: password resets, invitations and notifications",
                default="development's outbox when `DEBUG` is on (kept under `VAR_DIR/outbox/`, "
                "read at `/dev/outbox/`), else SMTP; "
                "`localhost`, `25`, none, none, `false`, `false`, "
                "`Countersign <countersign@localhost>`",
                example={"EMAIL_BACKEND": "config.outbox.OutboxBackend"},
                production={
                    "EMAIL_HOST": "smtp.example.com",
                    "EMAIL_PORT": "587",
                    "EMAIL_HOST_USER": "",
                    "EMAIL_HOST_PASSWORD": "",
                    "EMAIL_USE_TLS": "true",
                    "DEFAULT_FROM_EMAIL": '"Countersign <countersign@example.com>"',
                },
            ),
            Setting(
                ("NOTIFY_BASE_URL",),
                "base of links in notifications when `PUBLIC_BASE_URL` is not set (unset: "
                "`http://HOST:PORT`)",
            ),
            Setting(
                ("NOTIFY_TIMEOUT_SECONDS", "NOTIFY_MAX_ATTEMPTS", "NOTIFY_RETRY_BASE_SECONDS"),
                "one notification attempt's time limit (in all); attempts before giving up; "
                "backoff base",
            ),
            Setting(
                ("NOTIFY_SWEEP_SECONDS",),
                "beat interval for due notifications, lost fan-outs and follow-ups, and ladders",
            ),
            Setting(
                ("NOTIFY_FAN_OUT_GRACE_SECONDS",),
                "an open item not yet fanned out to the channels after this long (its message "
                "was lost) is fanned out by the sweep",
            ),
            Setting(
                ("NOTIFY_FOLLOW_UP_SWEEP_HOURS",),
                "how far back the sweep looks for decisions, expiries and voids whose follow-up "
                "(channels told what became of an item) never ran",
            ),
            Setting(
                ("SLACK_API_URL",),
                "the Web API the tenants' Slack apps call (a private install, a test stand-in)",
            ),
            Setting(("SLACK_TIMEOUT_SECONDS",), "the longest one Slack Web API call may take"),
            Setting(
                ("SLACK_MODAL_TIMEOUT_SECONDS",),
                "the longest opening a modal may take (it runs while Slack waits 3 s for the "
                "click's answer)",
            ),
            Setting(
                ("SLACK_USER_CACHE_SECONDS",),
                "how long what Slack said of a user (their confirmed e-mail) is kept before "
                "`users.info` is asked again",
            ),
            Setting(
                ("SLACK_SOCKET_MODE", "SLACK_SOCKET_SYNC_SECONDS"),
                "whether a worker opens Socket Mode connections for the Slack apps that have an "
                "app-level token, and how often it looks for apps set up, changed or removed",
            ),
        ),
    ),
    Group(
        "Logs, metrics and tracing",
        "[Health, metrics and tracing](metrics.md).",
        (
            Setting(
                ("LOG_LEVEL", "LOG_FORMAT"),
                "`json` for one JSON object per line; `LOG_LEVEL=DEBUG` also shows Celery's "
                "per-task and beat lines",
                default="`INFO`, `text` (`json` when `DEBUG=false`)",
                example={"LOG_FORMAT": "text"},
            ),
            Setting(
                ("ACCESS_LOG",),
                "one line per HTTP request (uvicorn's access log, under uvicorn or gunicorn "
                "alike), in `LOG_FORMAT`",
            ),
            Setting(
                ("METRICS_TOKEN",),
                "the bearer token `/metrics` asks for (unset: `/metrics` answers 404)",
            ),
            Setting(
                ("PROMETHEUS_MULTIPROC_DIR",),
                "the directory every process (web, workers, beat) shares its metrics through, "
                "on one host; empty it when every process is stopped",
            ),
            Setting(
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
                "an OTLP/HTTP collector (`http://otel-collector:4318`); setting it turns "
                "tracing on (or the second, for traces only)",
            ),
            Setting(
                ("OTEL_TRACES_ENABLED",),
                "`true` turns tracing on with the exporter's defaults (`localhost:4318`)",
            ),
            Setting(
                ("OTEL_TRACES_EXPORTER",),
                "`otlp`, `console` (each span printed as a JSON line on stdout, to look at "
                "without a collector; naming it turns tracing on), both comma-separated, or "
                "`none`",
            ),
            Setting(
                ("OTEL_SERVICE_NAME",),
                "the service's name in traces",
                default="`countersign`",
                example={"OTEL_SERVICE_NAME": "countersign"},
            ),
            Setting(
                ("OTEL_SDK_DISABLED",),
                "`true` keeps tracing off whatever else is set",
            ),
            Setting(
                ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT"),
                "the exporter's own settings (and the rest of OpenTelemetry's `OTEL_EXPORTER_*`)",
                default="the exporter's",
                read_by="OpenTelemetry's OTLP exporter",
            ),
        ),
    ),
    Group(
        "Processes",
        "Where `make run` and gunicorn listen ([Run in production](../how-to/production.md)).",
        (
            Setting(
                ("PORT", "HOST"),
                "where `make run` and gunicorn (`gunicorn.conf.py`) listen, and the address of "
                "links when `PUBLIC_BASE_URL` is not set (`0.0.0.0` is written `127.0.0.1`)",
                default="`8000`; `127.0.0.1` for `make run`, `0.0.0.0` for gunicorn",
                example={"HOST": "127.0.0.1", "PORT": "8000"},
                production={"HOST": "127.0.0.1", "PORT": "8000"},
            ),
            Setting(
                ("WEB_CONCURRENCY",),
                "gunicorn's worker processes (each an ASGI web process)",
            ),
            Setting(
                ("GUNICORN_GRACEFUL_TIMEOUT",),
                "seconds gunicorn gives a worker to finish its requests (and close its streams) "
                "when it stops",
            ),
        ),
    ),
)


def settings_all() -> list[Setting]:
    return [setting for group in GROUPS for setting in group.settings]


def names_all() -> list[str]:
    return [name for setting in settings_all() for name in setting.names]
