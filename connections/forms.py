from django import forms

from connections.services import TOKEN_MAX_LENGTH, ConnectError, token_text_clean


class TokenForm(forms.Form):
    token = forms.CharField(
        label="Token",
        max_length=TOKEN_MAX_LENGTH,
        error_messages={"required": "Paste the token."},
        # Never rendered back, not even after a field error: the page must not echo a secret.
        widget=forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "off", "spellcheck": "false"}
        ),
    )

    def clean_token(self) -> str:
        try:
            return token_text_clean(self.cleaned_data["token"])
        except ConnectError as exc:
            raise forms.ValidationError(str(exc)) from exc
