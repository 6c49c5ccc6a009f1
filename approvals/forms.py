"""The decision forms of the operator pages; the services validate again (they are the rule)."""

import json

from django import forms

from runtime.models import Interaction

REASON_MAX = 1000


class ApprovalForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=REASON_MAX,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Optional. The agent's model sees it with your decision.",
    )


class AnswerForm(forms.Form):
    """A question's answer: one of its choices, a custom answer when allowed, or free text."""

    def __init__(self, *args, interaction: Interaction, **kwargs):
        super().__init__(*args, **kwargs)
        request = interaction.request or {}
        self.choices = [str(c) for c in request.get("choices") or []]
        self.allow_custom = bool(request.get("allowCustom")) or not self.choices
        if self.choices:
            self.fields["choice"] = forms.ChoiceField(
                label="Answer",
                choices=[(c, c) for c in self.choices],
                widget=forms.RadioSelect,
                required=False,
            )
        if self.allow_custom:
            self.fields["custom"] = forms.CharField(
                label="Another answer" if self.choices else "Answer",
                required=False,
                max_length=4000,
                widget=forms.Textarea(attrs={"rows": 3}),
            )

    def clean(self):
        data = super().clean()
        custom = (data.get("custom") or "").strip()
        choice = data.get("choice") or ""
        if custom and choice:
            raise forms.ValidationError("Pick a choice or write another answer, not both.")
        value = custom or choice
        if not value:
            raise forms.ValidationError(
                "Pick one of the choices." if not self.allow_custom else "Write an answer."
            )
        data["value"] = value
        return data


class EffectResolveForm(forms.Form):
    """What became of a call whose outcome was lost (effects/v1)."""

    RESOLUTIONS = [
        ("happened", "It happened"),
        ("not_happened", "It did not happen: send it again"),
        ("fail", "Fail the task"),
    ]
    resolution = forms.ChoiceField(choices=RESOLUTIONS)
    result = forms.CharField(
        required=False,
        max_length=20000,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="When it happened: what it returned, as JSON or as text. The model sees it.",
    )

    def clean(self):
        data = super().clean()
        raw = (data.get("result") or "").strip()
        if data.get("resolution") == "happened":
            if not raw:
                self.add_error("result", "Say what the call returned (JSON or text).")
                return data
            try:
                data["result_value"] = json.loads(raw)
            except ValueError:
                data["result_value"] = raw
        else:
            data["result_value"] = None
        return data
