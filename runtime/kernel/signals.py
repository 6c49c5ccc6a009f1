"""Signals the core sends, so that edges can react without the core importing them."""

from django.dispatch import Signal

# Sent inside the transaction that opened an Interaction (kwargs: interaction). Receivers
# that notify people defer their work to after the commit: a turn never waits on them.
interaction_opened = Signal()
