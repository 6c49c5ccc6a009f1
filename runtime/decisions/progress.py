"""What an open approval's caller is told of its progress (interactions/v1 ``progress``, and
a line of text on the status message): the approvals given and required, the stage being
decided and its title, the deadline, and one line a person reads ("1 of 2 approvals; waiting
for the finance stage; expires 14:30 UTC").

Read from the interaction's row alone (what it recorded as it opened and as approvals came
in: runtime.decisions.interaction_state writes them), so that every pause and every status
update that says it, says the same. Never who approved (an operator's address is not the
caller's to read), nor a call's arguments.
"""

from datetime import UTC, datetime

from django.utils import timezone

from runtime.decisions.decision_models import Interaction
from runtime.policy.needs import Needs, opened_stages, stage_at


def approval_progress(interaction: Interaction) -> dict | None:
    """interactions/v1 ``progress`` of an open approval; None for other kinds."""
    if interaction.kind != Interaction.Kind.APPROVAL:
        return None
    stages = opened_stages(interaction)
    given = len(interaction.approvals or ())
    required = max(sum(stage.required for stage in stages), interaction.approvals_required, 1)
    progress: dict = {"approvals": given, "required": required}
    if len(stages) > 1:
        index = stage_at(stages, given)
        progress["stage"] = index + 1
        progress["stages"] = len(stages)
        if stages[index].title:
            progress["stageTitle"] = stages[index].title
    if interaction.expires_at:
        progress["expiresAt"] = _iso(interaction.expires_at)
    progress["text"] = progress_text(progress, interaction.expires_at)
    return progress


def progress_text(progress: dict, expires_at: datetime | None, now: datetime | None = None) -> str:
    """The progress as one line: "1 of 2 approvals; waiting for the finance stage; expires
    14:30 UTC" (the date too when it is not today's, in UTC)."""
    parts = []
    if progress["required"] > 1:
        parts.append(f"{progress['approvals']} of {progress['required']} approvals")
    else:
        parts.append("waiting for an approval")
    if "stage" in progress:
        title = progress.get("stageTitle")
        parts.append(
            f"waiting for the {title} stage"
            if title
            else f"waiting for stage {progress['stage']} of {progress['stages']}"
        )
    if expires_at is not None:
        parts.append(f"expires {deadline_text(expires_at, now)}")
    return "; ".join(parts)


def deadline_text(at: datetime, now: datetime | None = None) -> str:
    """``14:30 UTC`` today, ``2026-12-05 14:30 UTC`` another day (both in UTC)."""
    at = timezone.localtime(at, UTC)
    today = timezone.localtime(now or timezone.now(), UTC).date()
    when = at.strftime("%H:%M UTC")
    return when if at.date() == today else f"{at.date().isoformat()} {when}"


def progress_said(interaction: Interaction) -> str:
    """The line the status message adds under the prompt: only for an approval that needs
    more than one person (a quorum or stages), or whose deadline was moved; "" otherwise (a
    single approval's pause says its prompt alone, its deadline is in ``progress``)."""
    progress = approval_progress(interaction)
    if progress is None:
        return ""
    moved = bool((interaction.request or {}).get("deadline"))
    if progress["required"] <= 1 and not moved:
        return ""
    return progress["text"]


def _iso(at: datetime) -> str:
    return timezone.localtime(at, UTC).isoformat().replace("+00:00", "Z")


def recorded_facts(needs: Needs, approvals: int, stage: int) -> tuple[dict, str]:
    """(the audit's detail, what the call waits for now) of one approval recorded, the
    ``approvals``-th, counted in ``stage`` (from 1): with the stage that follows when it
    completed its stage (the follow-ups tell the channels who decides from now on)."""
    detail: dict = {"approvals": approvals, "required": needs.required}
    after = stage_at(needs.stages, approvals)
    waits = "another person's approval"
    if needs.staged:
        detail.update(stage=stage, stages=len(needs.stages))
        waits = f"the next approval (stage {after + 1})"
    if needs.staged and after + 1 != stage:
        following = needs.stages[after]
        detail["nextStage"] = {
            "stage": after + 1,
            "approvers": list(following.approvers),
            "title": following.title,
        }
    return detail, waits
