"""Signals the core sends, so that edges can react without the core importing them."""

from django.dispatch import Signal

# Sent inside the transaction that opened an Interaction (kwargs: interaction). Receivers
# that notify people defer their work to after the commit: a turn never waits on them.
interaction_opened = Signal()

# Sent inside the transaction that moved an interaction on after it opened (kwargs:
# interaction, event, audit): ``decided`` (a person, a program or the caller), ``expired``,
# ``voided`` (an approval that no longer matched; the interaction reopens), ``canceled`` (its
# task was) or ``recorded`` (one approval of several, the interaction stays open); ``audit``
# is the AuditEvent written with it, which names the event once. Receivers that notify
# people defer their work to after the commit: a decision never waits on them.
interaction_changed = Signal()
