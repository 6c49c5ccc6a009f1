"""The tenant's default ladder, as its admin sets it on the tenant's settings page: one
sentence such as "remind after 1h; escalate to admins after 4h; warn 30m before expiry;
expire after 24h, then deny", parsed by the same parser as AGENT.md's ladders
(runtime.policy.ladders).

It is kept in two places, each read where it is used: the reminders, escalations and
warnings are the tenant's ladder (the Ladder row without agent and tool, which the beat
climbs, notifications.services.ladder_for), and the expire step is ``Tenant.default_expiry``,
which the runtime reads when an item opens (runtime.policy.ladders.expiry_of: an agent
without an expiry of its own gets it). One change of the sentence is one transaction and one
``tenant.settings_changed`` audit row with the old and new sentences.
"""

from django.db import transaction

from notifications.models import Ladder
from runtime.policy.ladders import (
    LadderError,
    sentence_steps,
    step_sentence,
    steps_parse,
    steps_stored,
)
from tenants.models import Tenant
from tenants.signals import tenant_changed

# The setting's name in the audit's ``changed`` (beside TENANT_SETTINGS' names).
SETTING = "default_ladder"


class TenantLadderError(ValueError):
    """Why a ladder sentence cannot be used, in words for the form."""


def tenant_ladder_text(tenant: Tenant) -> str:
    """The tenant's default ladder as the sentence its settings page shows ("" for none)."""
    row = Ladder.objects.filter(tenant=tenant, agent__isnull=True, tool="").first()
    steps = list(row.steps) if row is not None else []
    if tenant.default_expiry:
        steps.append(tenant.default_expiry)
    return "; ".join(step_sentence(step) for step in steps if isinstance(step, dict))


def tenant_ladder_parse(text: str) -> tuple[list[dict], dict]:
    """(the steps of the tenant's Ladder row, the expire step or {}) of a sentence, as
    stored; TenantLadderError names the step that is wrong and why."""
    sentences = sentence_steps(text)
    if not sentences:
        return [], {}
    try:
        parsed = steps_stored(steps_parse(sentences))
    except LadderError as exc:
        if not exc.path:
            raise TenantLadderError(f"{exc.message[0].upper()}{exc.message[1:]}.") from None
        index = exc.path[0]
        said = sentences[index] if isinstance(index, int) and index < len(sentences) else ""
        # The parser names the sentence it could not read; else the step is named here.
        named = f" ({said!r})" if said and repr(said) not in exc.message else ""
        raise TenantLadderError(f"Step {index + 1}{named}: {exc.message}.") from None
    expire = [step for step in parsed if step["action"] == "expire"]
    return [step for step in parsed if step["action"] != "expire"], (expire[0] if expire else {})


def tenant_ladder_set(*, tenant: Tenant, text: str, actor: str) -> bool:
    """Set the tenant's default ladder from its sentence; False when nothing changed.
    Raises TenantLadderError (and changes nothing) when the sentence cannot be used."""
    steps, expire = tenant_ladder_parse(text)
    with transaction.atomic():
        locked = Tenant.objects.select_for_update().get(pk=tenant.pk)
        before = tenant_ladder_text(locked)
        row = Ladder.objects.filter(tenant=locked, agent__isnull=True, tool="").first()
        if row is None:
            if steps:
                Ladder.objects.create(tenant=locked, agent=None, tool="", steps=steps)
        elif not steps:
            row.delete()
        elif row.steps != steps:
            row.steps = steps
            row.save(update_fields=["steps"])
        if locked.default_expiry != expire:
            locked.default_expiry = expire
            locked.save(update_fields=["default_expiry"])
        tenant.default_expiry = expire
        after = tenant_ladder_text(locked)
        if after == before:
            return False
        tenant_changed.send(
            sender=Tenant,
            tenant=locked,
            actor=actor,
            action="tenant.settings_changed",
            detail={"changed": {SETTING: [before, after]}},
        )
    return True
