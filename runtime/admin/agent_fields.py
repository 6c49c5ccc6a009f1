"""An agent's skills, tools and model settings in Django admin as forms, not JSON: a row per
skill and per tool (``RowsField``), and the model's provider, name, credential (a select of
the tenant's credentials) and limits as fields (``ModelField``). Only a scripted model's
script stays text, as YAML in an editor with line numbers.

Each reads back what it shows: a row (or the model) whose fields say what it said before is
kept exactly as written (``orig``), and the keys no field shows are kept as they were
(``extra``), so opening and saving the page changes nothing. The AgentForm's clean_* methods
check the values as AGENT.md's load does; their problems are shown next to the row or field
they name (``problems``)."""

import json
from dataclasses import dataclass

import yaml
from django import forms
from django.core.exceptions import ValidationError

from runtime.llm.openai_spec import CHAT_PARAMETERS, PARAMETERS, RESPONSES_PARAMETERS

SPARE_ROWS = 1
MAX_ROWS = 100


@dataclass(frozen=True)
class Column:
    """A key of a row: ``kind`` text, list (words separated by commas), lines (one per line),
    select (``options``) or yaml (a value written as YAML)."""

    key: str
    label: str
    kind: str = "text"
    options: tuple = ()
    help: str = ""
    placeholder: str = ""


def _shown(column: Column, value) -> str | None:
    """A stored value as its field shows it; None when the field cannot show it whole."""
    if value is None:
        return ""
    if column.kind == "list":
        ok = isinstance(value, list) and all(isinstance(v, str) and "," not in v for v in value)
        return ", ".join(value) if ok else None
    if column.kind == "lines":
        ok = isinstance(value, list) and all(isinstance(v, str) and "\n" not in v for v in value)
        return "\n".join(value) if ok else None
    if column.kind == "yaml":
        return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=100)
    if column.kind == "select":
        return value if value in column.options else None
    return value if isinstance(value, str) else None


def _read(column: Column, text: str):
    """A posted field as the stored value (None: the key is left out); ValueError says why."""
    text = (text or "").replace("\r\n", "\n")
    if not text.strip():
        return None
    if column.kind == "list":
        return [w.strip() for w in text.split(",") if w.strip()]
    if column.kind == "lines":
        return [line.strip() for line in text.split("\n") if line.strip()]
    if column.kind == "yaml":
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"not YAML: {exc}") from None
    return text.strip()


def _bare(item: dict) -> dict:
    """A mapping without its empty values: ``tags: []`` says what no tags say."""
    return {k: v for k, v in item.items() if v not in (None, "", [], {})}


class RowsWidget(forms.Widget):
    template_name = "runtime/admin/agent_rows.html"

    class Media:
        css = {"all": ["policy-editor.css"]}
        js = ["policy-editor.js"]

    def __init__(self, columns: tuple[Column, ...], noun: str, attrs=None):
        super().__init__(attrs)
        self.columns, self.noun = columns, noun
        self.problems: dict[str, list[str]] = {}
        self.name = ""

    def value_from_datadict(self, data, files, name):
        self.name = name
        if f"{name}-total" not in data:
            return None
        try:
            total = max(0, min(int(data.get(f"{name}-total", "0")), MAX_ROWS))
        except ValueError:
            total = 0
        rows = []
        for index in range(total):
            prefix = f"{name}-{index}-"
            row = {c.key: data.get(f"{prefix}{c.key}", "") for c in self.columns}
            row |= {
                "orig": data.get(f"{prefix}orig", ""),
                "extra": data.get(f"{prefix}extra", ""),
                "delete": bool(data.get(f"{prefix}delete")),
            }
            rows.append(row)
        return {"rows": rows}

    def value_omitted_from_data(self, data, files, name):
        return f"{name}-total" not in data

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        if isinstance(value, dict) and "rows" in value:
            raws = value["rows"]
        else:
            raws = [self._raw(item) for item in (value if isinstance(value, list) else [])]
            raws += [self._raw({}) for _ in range(SPARE_ROWS)]
        rows = []
        for index, raw in enumerate(raws):
            prefix = f"{name}-{index}-"
            rows.append(
                {
                    "prefix": prefix,
                    "number": index + 1,
                    "orig": raw["orig"],
                    "extra": raw["extra"],
                    "delete": raw["delete"],
                    "errors": self.problems.get(f"{prefix}row", []),
                    "fields": [
                        {
                            "name": f"{prefix}{c.key}",
                            "column": c,
                            "value": raw[c.key],
                            "errors": self.problems.get(f"{prefix}{c.key}", []),
                        }
                        for c in self.columns
                    ],
                }
            )
        context["rows"] = {"name": name, "rows": rows, "total": len(rows), "noun": self.noun}
        return context

    def _raw(self, item) -> dict:
        item = item if isinstance(item, dict) else {}
        raw: dict = {"orig": json.dumps(item) if item else "", "delete": False}
        extra = {k: v for k, v in item.items() if k not in {c.key for c in self.columns}}
        for column in self.columns:
            shown = _shown(column, item.get(column.key))
            if shown is None:  # a value its field cannot show is kept as written
                extra[column.key] = item[column.key]
                shown = ""
            raw[column.key] = shown
        raw["extra"] = json.dumps(extra) if extra else ""
        return raw


class RowsField(forms.Field):
    """A list of mappings (an agent's skills or tools) as rows."""

    def __init__(self, columns: tuple[Column, ...], noun: str, **kwargs):
        kwargs.setdefault("required", False)
        kwargs["widget"] = RowsWidget(columns, noun)
        super().__init__(**kwargs)
        self.columns = columns
        self._places: list[int] = []  # the row of each item clean() read

    def has_changed(self, initial, data):
        if data is None:
            return False
        try:
            return self.clean(data) != (initial or [])
        except ValidationError:
            return True

    def note(self, index: int | None, key: str | None, message: str) -> None:
        """Show ``message`` next to row ``index``'s field ``key`` (or the row)."""
        if index is None or index >= len(self._places):
            return
        prefix = f"{self.widget.name}-{self._places[index]}-"
        where = key if key in {c.key for c in self.columns} else "row"
        self.widget.problems.setdefault(f"{prefix}{where}", []).append(message)

    def clean(self, value):
        self.widget.problems, self._places = {}, []
        if value is None:
            raise ValidationError(f"The {self.widget.noun}s were not sent; reload the page.")
        if not isinstance(value, dict):
            return value
        found, errors = [], []
        for index, raw in enumerate(value["rows"]):
            if raw["delete"]:
                continue
            item, problems = {}, []
            for column in self.columns:
                try:
                    read = _read(column, raw[column.key])
                except ValueError as exc:
                    problems.append((column.key, str(exc)))
                    continue
                if read is not None:
                    item[column.key] = read
            try:
                extra = json.loads(raw["extra"]) if raw["extra"] else {}
            except ValueError:
                extra = {}
            if not item and not problems:
                continue  # a spare row left empty
            if isinstance(extra, dict):
                item |= {k: v for k, v in extra.items() if k not in item}
            try:
                orig = json.loads(raw["orig"]) if raw["orig"] else None
            except ValueError:
                orig = None
            self._places.append(index)
            for key, message in problems:
                self.note(len(self._places) - 1, key, message)
                errors.append(f"{self.widget.noun} {len(self._places)}: {key}: {message}")
            found.append(orig if isinstance(orig, dict) and _bare(orig) == _bare(item) else item)
        if errors:
            raise ValidationError(errors)
        return found


SKILL_COLUMNS = (
    Column("id", "id", placeholder="deploy"),
    Column("name", "name", placeholder="Deploy a build"),
    Column("description", "description", placeholder="Deploys a build to an environment."),
    Column("tags", "tags", "list", placeholder="deploy, release"),
    Column("examples", "examples", "lines", help="one example a line"),
)
TOOL_COLUMNS = (
    Column("server", "server", placeholder="deploy"),
    Column("tool", "tool", placeholder="deploy_build (none: every tool of the server)"),
    Column("description", "description"),
    Column("reason", "reason", help="why it needs a person, shown with a held call"),
    Column("risk", "risk", "select", options=("normal", "high")),
    Column(
        "schema",
        "input schema (YAML)",
        "yaml",
        help="the JSON Schema of its arguments, written as YAML; none: as its server says",
    ),
)


@dataclass
class ModelKey:
    key: str
    label: str
    providers: tuple[str, ...]
    kind: str = "text"  # text | number | credential
    help: str = ""


OPENAI = ("openai", "openai-responses")
MODEL_KEYS: tuple[ModelKey, ...] = (
    ModelKey("model", "model", OPENAI, help="the model's name at the provider, e.g. gpt-4.1"),
    ModelKey("base_url", "base URL", OPENAI, help="none: the provider's own"),
    ModelKey("credential", "credential", OPENAI, "credential", "the API key it sends"),
    ModelKey("temperature", "temperature", OPENAI, "number"),
    ModelKey("max_output_tokens", "max output tokens", OPENAI, "number"),
    ModelKey("url", "URL", ("http",), help="your agent's endpoint"),
    ModelKey("secret", "signing secret", ("http",), "credential", "the whsec_ credential"),
    ModelKey("timeout", "timeout (seconds)", ("http",), "number"),
    ModelKey("maxWaitSeconds", "max wait (seconds)", ("gateway",), "number"),
    ModelKey("toolsPageSize", "tools page size", ("gateway",), "number"),
    ModelKey("sampling", "sampling", ("gateway",), "value", "true: pass sampling requests on"),
)
# The request parameters an openai model passes through (runtime.llm.openai_spec), a field
# each: a number, true or false, a JSON list, or a text.
MODEL_KEYS += tuple(
    ModelKey(
        name,
        name.replace("_", " "),
        tuple(
            provider
            for provider, known in (
                ("openai", CHAT_PARAMETERS),
                ("openai-responses", RESPONSES_PARAMETERS),
            )
            if name in known
        ),
        "value",
        PARAMETERS[name][1],
    )
    for name in PARAMETERS
) + (
    ModelKey(
        "max_tokens_field", "max tokens field", ("openai",), help="max_tokens for old servers"
    ),
)
LIMIT_KEYS = ("steps", "tool_calls", "tokens", "bad_replies", "tool_result_bytes")
MEMORY_KEYS = ("turns", "tokens")


def _number(text: str):
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text  # the model's checks say what it must be


def _value_shown(value) -> str:
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return value
        return json.dumps(value)  # "5" as a text, not the number 5
    return json.dumps(value)


def _value_read(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def script_line(text: str, path: list) -> int | None:
    """The line (from 1) of the value at ``path`` in a script written as YAML."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    for key in path:
        if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        elif isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == key), None)
            if found is None:
                break
            node = found
        else:
            break
    return None if node is None else node.start_mark.line + 1


class ModelWidget(forms.Widget):
    template_name = "runtime/admin/agent_model.html"

    class Media:
        css = {"all": ["policy-editor.css"]}
        js = ["policy-editor.js"]

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.providers: list[str] = []
        self.credentials: list[str] = []  # the tenant's (AgentForm sets them)
        self.problems: dict[str, list[str]] = {}
        self.name = "model"

    def value_from_datadict(self, data, files, name):
        self.name = name
        if f"{name}-provider" not in data:
            return None
        posted = {"posted": True, "provider": data.get(f"{name}-provider", "")}
        for key in MODEL_KEYS:
            posted[key.key] = data.get(f"{name}-{key.key}", "")
        for limit in LIMIT_KEYS:
            posted[f"limits.{limit}"] = data.get(f"{name}-limits.{limit}", "")
        for memory in MEMORY_KEYS:
            posted[f"memory.{memory}"] = data.get(f"{name}-memory.{memory}", "")
        for other in ("script", "orig", "extra"):
            posted[other] = data.get(f"{name}-{other}", "")
        return posted

    def value_omitted_from_data(self, data, files, name):
        return f"{name}-provider" not in data

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        raw = value if isinstance(value, dict) and value.get("posted") else self._raw(value)
        credentials = list(self.credentials)
        for key in MODEL_KEYS:
            if key.kind == "credential" and raw[key.key] and raw[key.key] not in credentials:
                credentials.append(raw[key.key])
        providers = list(self.providers)
        if raw["provider"] and raw["provider"] not in providers:
            providers.append(raw["provider"])
        lines = max(1, raw["script"].count("\n") + (0 if raw["script"].endswith("\n") else 1))
        context["model"] = {
            "name": name,
            "provider": raw["provider"],
            "providers": providers,
            "keys": [
                {
                    "name": f"{name}-{key.key}",
                    "key": key,
                    "value": raw[key.key],
                    "providers": " ".join(key.providers),
                    "errors": self.problems.get(key.key, []),
                }
                for key in MODEL_KEYS
            ],
            "credentials": credentials,
            "limits": [
                {"name": f"{name}-limits.{k}", "key": k, "value": raw[f"limits.{k}"]}
                for k in LIMIT_KEYS
            ],
            "memory": [
                {"name": f"{name}-memory.{k}", "key": k, "value": raw[f"memory.{k}"]}
                for k in MEMORY_KEYS
            ],
            "script": raw["script"],
            "lines": range(1, lines + 1),
            "orig": raw["orig"],
            "extra": raw["extra"],
            "extra_keys": sorted(json.loads(raw["extra"])) if raw["extra"] else [],
            "errors": {
                k or "general": self.problems.get(k, [])
                for k in ("provider", "script", "limits", "memory", "")
            },
        }
        return context

    def _raw(self, model) -> dict:
        model = model if isinstance(model, dict) else {}
        raw: dict = {"provider": str(model.get("provider", "scripted"))}
        extra = {}
        for key in MODEL_KEYS:
            value = model.get(key.key)
            if value is None:
                raw[key.key] = ""
            elif key.kind == "value":
                raw[key.key] = _value_shown(value)
            elif isinstance(value, str | int | float) and not isinstance(value, bool):
                raw[key.key] = str(value)
            else:
                raw[key.key], extra[key.key] = "", value
        for group, keys in (("limits", LIMIT_KEYS), ("memory", MEMORY_KEYS)):
            values = model.get(group)
            values = values if isinstance(values, dict) else {}
            for inner in keys:
                value = values.get(inner)
                raw[f"{group}.{inner}"] = "" if value is None else str(value)
            others = {k: v for k, v in values.items() if k not in keys}
            if others or (group in model and not isinstance(model[group], dict)):
                extra[group] = model[group]
        script = model.get("script")
        raw["script"] = (
            yaml.safe_dump(script, sort_keys=False, allow_unicode=True, width=100)
            if script is not None
            else ""
        )
        shown = {"provider", "script", "limits", "memory", *(k.key for k in MODEL_KEYS)}
        extra |= {k: v for k, v in model.items() if k not in shown}
        raw["extra"] = json.dumps(extra) if extra else ""
        raw["orig"] = json.dumps(model) if model else ""
        return raw


class ModelField(forms.Field):
    """An agent's ``model`` mapping from its fields (see the module)."""

    widget = ModelWidget

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)

    def has_changed(self, initial, data):
        if data is None:
            return False
        try:
            return self.clean(data) != (initial or {})
        except ValidationError:
            return True

    def note(self, key: str, message: str) -> None:
        """Show ``message`` next to the field ``key`` (model, credential, script, ...)."""
        known = {k.key for k in MODEL_KEYS} | {"provider", "script", "limits", "memory"}
        self.widget.problems.setdefault(key if key in known else "", []).append(message)

    def clean(self, value):
        self.widget.problems = {}
        self.script_text = ""
        if value is None:
            raise ValidationError("The model settings were not sent; reload the page.")
        if not value.get("posted"):
            return value
        provider = value["provider"].strip()
        model: dict = {"provider": provider}
        for key in MODEL_KEYS:
            text = value[key.key].strip()
            if text and provider in key.providers:
                if key.kind == "value":
                    model[key.key] = _value_read(text)
                else:
                    model[key.key] = _number(text) if key.kind == "number" else text
        for group, keys in (("limits", LIMIT_KEYS), ("memory", MEMORY_KEYS)):
            found = {
                k: _number(value[f"{group}.{k}"]) for k in keys if value[f"{group}.{k}"].strip()
            }
            if found:
                model[group] = found
        if provider == "scripted":
            self.script_text = value["script"].replace("\r\n", "\n")
            try:
                model["script"] = (
                    yaml.safe_load(self.script_text) if self.script_text.strip() else []
                )
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f"line {mark.line + 1}: " if mark is not None else ""
                self.note("script", f"{where}not YAML ({getattr(exc, 'problem', exc)})")
                raise ValidationError(f"script: {where}not YAML") from None
        try:
            extra = json.loads(value["extra"]) if value["extra"] else {}
            orig = json.loads(value["orig"]) if value["orig"] else None
        except ValueError:
            extra, orig = {}, None
        # Keys no field shows belong to the provider they were written for.
        same_provider = not isinstance(orig, dict) or orig.get("provider") == provider
        for key, kept in (extra if isinstance(extra, dict) else {}).items():
            if key in ("limits", "memory") and isinstance(kept, dict):
                model[key] = {**kept, **model.get(key, {})}
            elif key not in model and (same_provider or key in ("limits", "memory")):
                model[key] = kept
        return orig if isinstance(orig, dict) and _bare(orig) == _bare(model) else model
