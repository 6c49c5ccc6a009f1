"""The item page's Extend form: how much longer an open item stays open, one of the
durations that still fit its bound (runtime.decisions.deadlines.extend_choices); the service
checks again (runtime.decisions.deadline_moves.interaction_extend)."""

from django import forms

from runtime.decisions.deadlines import extend_choices


class ExtendForm(forms.Form):
    by = forms.ChoiceField(label="Extend the deadline by", choices=())

    def __init__(self, *args, interaction, **kwargs):
        super().__init__(*args, **kwargs)
        self.choices = extend_choices(interaction)
        field = self.fields["by"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = self.choices
        field.error_messages["invalid_choice"] = (
            "Choose one of the durations offered: it is extended by at most what is left of "
            "its bound."
        )

    @property
    def offered(self) -> bool:
        return bool(self.choices)
