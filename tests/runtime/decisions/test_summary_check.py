"""The deterministic check of a model's summary of a held call: a value the summary names
that the arguments do not hold is flagged; values the arguments hold, in any spelling of a
number, are not; redacted fields hold no values."""

from runtime.decisions.summary_check import summary_unsupported

ARGUMENTS = {
    "amount": 120000,
    "currency": "JPY",
    "payee": "ACME KK",
    "build": "2026.12.07-1",
    "target": {"host": "prod-db.internal", "replicas": 3},
    "token": "tok-SECRET-4711",
}


def test_a_summary_of_what_the_arguments_hold_is_not_flagged():
    summary = (
        "Sends 120,000 JPY to 'ACME KK' and deploys build 2026.12.07-1 to prod-db.internal "
        "with 3 replicas."
    )
    assert summary_unsupported(summary, ARGUMENTS) == []


def test_a_value_absent_from_the_arguments_is_flagged():
    summary = (
        'Sends 1,200,000 JPY to "ACME Holdings" and deploys build 2026.12.08-1 to prod-db.internal.'
    )
    assert summary_unsupported(summary, ARGUMENTS) == [
        "ACME Holdings",
        "1,200,000",
        "2026.12.08-1",
    ]


def test_a_redacted_field_holds_no_value_to_match():
    summary = "Uses token tok-SECRET-4711 for the deploy."
    assert summary_unsupported(summary, ARGUMENTS) == []
    assert summary_unsupported(summary, ARGUMENTS, redact=["token"]) == ["tok-SECRET-4711"]


def test_prose_is_not_a_value():
    assert summary_unsupported("Replaces what customers run in production.", ARGUMENTS) == []
