"""The question page's form for a tool server's elicitation (MCP): one input per field of the
requested schema (runtime.decisions.question_forms), checked as the decision flow checks
every channel's answer; sent, it answers ``accept`` with the fields filled in; the page's
Decline button answers ``decline``."""

from typing import Any

from django import forms

from runtime.decisions.decision_models import Interaction
from runtime.decisions.question_forms import (
    TEXT_MAX,
    FormError,
    FormField,
    field_value_check,
    form_fields,
)


def _input(field: FormField) -> forms.Field:
    common: dict[str, Any] = {
        "label": field.title,
        "help_text": field.description,
        "required": False,
    }
    if field.kind == "boolean":
        return forms.BooleanField(initial=field.default is True, **common)
    if field.kind == "choice":
        empty = [] if field.required else [("", "—")]
        return forms.ChoiceField(
            choices=[*empty, *field.choices], initial=field.default or "", **common
        )
    if field.kind == "choices":
        return forms.MultipleChoiceField(
            choices=list(field.choices),
            widget=forms.CheckboxSelectMultiple,
            initial=field.default or [],
            **common,
        )
    if field.kind in ("number", "integer"):
        kind = forms.IntegerField if field.kind == "integer" else forms.FloatField
        common.update(min_value=field.minimum, max_value=field.maximum)
        return kind(initial=field.default, **common)
    widget_type = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime-local"}
    return forms.CharField(
        max_length=min(field.max_length or TEXT_MAX, TEXT_MAX),
        initial=field.default,
        widget=forms.TextInput(attrs={"type": widget_type.get(field.format, "text")}),
        strip=True,
        **common,
    )


class ElicitationForm(forms.Form):
    """The fields a tool server asks a person to fill in (``fields``), as MCP's content."""

    def __init__(self, *args, interaction: Interaction, **kwargs):
        kwargs.setdefault("prefix", "form")
        super().__init__(*args, **kwargs)
        self.form_fields = form_fields(interaction.request.get("form") or {})
        for field in self.form_fields:
            self.fields[field.name] = _input(field)
            if field.required and field.kind != "boolean":
                self.fields[field.name].label = f"{field.title} (required)"
                self.fields[field.name].widget.attrs["aria-required"] = "true"

    def clean(self):
        super().clean()
        data = self.cleaned_data
        content = {}
        for field in self.form_fields:
            value = data.get(field.name)
            if field.kind == "boolean":
                content[field.name] = bool(value)  # an unticked box says false
                continue
            if value is None or value == "" or value == []:
                if field.required:
                    self.add_error(field.name, "This field is required.")
                continue
            try:
                content[field.name] = field_value_check(field, value)
            except FormError as exc:
                self.add_error(field.name, str(exc))
        data["content"] = content
        return data


def elicitation_of(interaction: Interaction) -> bool:
    """Whether the question is a tool server's (its answer is a form, not free text)."""
    return interaction.kind == Interaction.Kind.QUESTION and isinstance(
        (interaction.request or {}).get("form"), dict
    )
