# syntax=docker/dockerfile:1
# Countersign: one image for every process (web, worker, beat, migrate); compose.yaml shows
# how to run it, docs/how-to/production.md lists the commands.

ARG PYTHON_VERSION=3.12

# --- build: the virtual environment, from the pinned versions -----------------------------
FROM python:${PYTHON_VERSION}-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY . .
RUN pip install -c constraints.txt .

# --- runtime: the venv, the source and the collected static files, as a non-root user -----
FROM python:${PYTHON_VERSION}-slim AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DEBUG=false \
    LOG_FORMAT=json \
    VAR_DIR=/app/var \
    PORT=8000
RUN groupadd --system --gid 10001 countersign \
 && useradd --system --uid 10001 --gid countersign --home-dir /app --shell /usr/sbin/nologin countersign
WORKDIR /app
COPY --from=build /opt/venv /opt/venv
COPY --chown=countersign:countersign . .
# Static files are part of the image (whitenoise serves the hashed names); the settings need
# a SECRET_KEY to load, so this step gets a throwaway one that the image does not keep.
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput \
 && mkdir -p /app/var \
 && chown -R countersign:countersign /app/var /app/staticfiles
USER countersign:countersign
EXPOSE 8000
CMD ["gunicorn", "config.asgi:application", "-k", "uvicorn_worker.UvicornWorker", "-c", "gunicorn.conf.py"]
