"""Decisions: interactions (the pauses of a turn), effects (the tool-call journal), who may
decide, receipts, standing rules, answers, and the reads of the operators' inbox. Above the
kernel and agents, below the turn."""
