"""The extensions of the profile this endpoint follows (their documents are at the URIs below).
URIs are used verbatim."""

INTERACTIONS = "https://docs.nylorun.com/a2a/interactions/v1"
EFFECTS = "https://docs.nylorun.com/a2a/effects/v1"
PROGRESS = "https://docs.nylorun.com/a2a/progress/v1"
TELEMETRY = "https://docs.nylorun.com/a2a/telemetry/v1"
FILES = "https://docs.nylorun.com/a2a/files/v1"

DESCRIPTIONS = {
    INTERACTIONS: "Open approvals, questions and connection requests on the status message, and the caller's answer on the same task.",
    EFFECTS: "uncertain: the id of a tool call whose outcome was lost.",
    PROGRESS: "The agent's plan: up to 20 steps, each with a label, a state and a note.",
    TELEMETRY: "Totals (steps, tokens, costUsd) and the turn's trace id on the terminal status update.",
    FILES: "Each artifact's kind, version, size, sha256 and path.",
}
# The extensions this server implements, in the order the card lists them.
IMPLEMENTED = [INTERACTIONS, EFFECTS, PROGRESS, TELEMETRY, FILES]
