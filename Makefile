# The two commands: `make run` and `make test`. Both create .venv and install when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The a2a-sdk 0.3 client of tests/interop/test_sdk03.py: a virtualenv of its own, since the
# project's a2a-sdk 1.x is the same package.
VENV03 := .venv-sdk03
STAMP03 := $(VENV03)/.installed
PORT ?= 8000

.PHONY: run test install lint typecheck format docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall when the dependency ranges or the pinned versions change.
$(STAMP): $(BIN)/python pyproject.toml constraints.txt clients/python/pyproject.toml
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]' -e ./clients/python
	touch $(STAMP)

# The reference MCP server `everything` (npm) that tests/runtime/tools/test_mcp_everything.py runs.
EVERYTHING := tests/mcp_everything
STAMPMCP := $(EVERYTHING)/node_modules/.installed

$(STAMPMCP): $(EVERYTHING)/package.json $(EVERYTHING)/package-lock.json
	npm ci --prefix $(EVERYTHING) --no-audit --no-fund --silent
	touch $(STAMPMCP)

# The TypeScript SDK's MCP client (npm) that tests/mcp_gateway/test_typescript_client.py runs.
MCPCLIENT := tests/mcp_client_ts
STAMPMCPCLIENT := $(MCPCLIENT)/node_modules/.installed

$(STAMPMCPCLIENT): $(MCPCLIENT)/package.json $(MCPCLIENT)/package-lock.json
	npm ci --prefix $(MCPCLIENT) --no-audit --no-fund --silent
	touch $(STAMPMCPCLIENT)

$(STAMP03): tests/interop/sdk03/requirements.txt
	$(PYTHON) -m venv $(VENV03)
	$(VENV03)/bin/pip install --quiet -r tests/interop/sdk03/requirements.txt
	touch $(STAMP03)

install: $(STAMP) $(STAMP03) $(STAMPMCP) $(STAMPMCPCLIENT)

run: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	PORT=$(PORT) $(BIN)/python scripts/run.py

# Tests keep their files (SQLite test database, filesystem queue) apart from `make run`'s.
test: $(STAMP) $(STAMP03) $(STAMPMCP) $(STAMPMCPCLIENT)
	VAR_DIR=$(CURDIR)/var/test $(BIN)/python -m pytest $(PYTEST_ARGS)

# The linter and the formatter's check (ruff), then the type checker (mypy, settings in
# pyproject.toml): both run in CI before the tests.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The documentation site (mkdocs.yml): the generated reference pages and the .env examples are
# written again from the code (scripts/docs_reference.py), then MkDocs builds docs/ into
# var/site with --strict: a warning (a broken link or anchor, a page left out of the nav) fails.
docs: $(STAMP)
	$(BIN)/python scripts/docs_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) $(VENV03) var staticfiles .pytest_cache $(EVERYTHING)/node_modules
