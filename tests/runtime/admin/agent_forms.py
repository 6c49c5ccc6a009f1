"""What an agent's page in Django admin posts for its model, skills and tools when a person
fills their fields (runtime.admin.agent_fields): the fields of a mapping, as typed."""

import json

import yaml

from runtime.admin.agent_fields import LIMIT_KEYS, MEMORY_KEYS, MODEL_KEYS


def model_fields(data: dict, model: dict) -> dict:
    """``data`` with the model's fields filled to say ``model`` (what is not a field is not
    sent: the fields hold every key a person may set)."""
    data = {k: v for k, v in data.items() if not k.startswith("model-")}
    data["model-provider"] = model.get("provider", "")
    for key in MODEL_KEYS:
        value = model.get(key.key)
        if value is None:
            data[f"model-{key.key}"] = ""
        elif key.kind == "value" and not isinstance(value, str):
            data[f"model-{key.key}"] = json.dumps(value)
        else:
            data[f"model-{key.key}"] = str(value)
    for group, keys in (("limits", LIMIT_KEYS), ("memory", MEMORY_KEYS)):
        for key in keys:
            value = (model.get(group) or {}).get(key)
            data[f"model-{group}.{key}"] = "" if value is None else str(value)
    script = model.get("script")
    data["model-script"] = yaml.safe_dump(script, sort_keys=False) if script is not None else ""
    data["model-orig"] = data["model-extra"] = ""
    return data


def rows_fields(data: dict, name: str, items: list[dict]) -> dict:
    """``data`` with the rows of ``name`` (skills, tools) filled to say ``items``."""
    data = {k: v for k, v in data.items() if not k.startswith(f"{name}-")}
    data[f"{name}-total"] = str(len(items))
    for index, item in enumerate(items):
        prefix = f"{name}-{index}-"
        for key, value in item.items():
            if isinstance(value, list):
                value = "\n".join(value) if key == "examples" else ", ".join(value)
            elif key == "schema":
                value = yaml.safe_dump(value)
            data[f"{prefix}{key}"] = str(value)
    return data
