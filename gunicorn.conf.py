"""Gunicorn's settings for Countersign's web processes (read with ``-c gunicorn.conf.py``).

The command everywhere (docs/how-to/production.md, Dockerfile, compose.yaml, Procfile,
deploy/systemd) is

    gunicorn config.asgi:application -k uvicorn_worker.UvicornWorker -c gunicorn.conf.py

``PORT`` (default 8000) and ``WEB_CONCURRENCY`` (worker processes, default 4) come from the
environment, as platforms that read a Procfile set them.
"""

import os

bind = f"{os.environ.get('HOST', '0.0.0.0')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "4"))
worker_class = "uvicorn_worker.UvicornWorker"
# A blocking SendMessage waits up to A2A_WAIT_MS on the event loop, which keeps the worker's
# heartbeat going; a graceful restart lets such waits end first.
graceful_timeout = int(os.environ.get("GUNICORN_GRACEFUL_TIMEOUT", "30"))
# One line per request is uvicorn's access log, in Countersign's format, when ACCESS_LOG is on
# (config/settings.py LOGGING, which also takes any handler gunicorn gives uvicorn's logger);
# gunicorn's own access log would repeat it.
accesslog = None
errorlog = "-"


def child_exit(server, worker):
    """A worker process exited: drop its live gauges (prometheus_client multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
