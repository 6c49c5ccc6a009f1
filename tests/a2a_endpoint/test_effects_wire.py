"""An uncertain effect (effects/v1) on the wire: under the extension for a caller that
activated it, plain text otherwise, never the call's arguments."""

import pytest

from a2a_endpoint import wire
from runtime.kernel import extensions as ext
from tests.a2a_client import as_task
from tests.core import Maker

pytestmark = pytest.mark.django_db


def test_an_uncertain_effect_is_shown_only_under_effects_v1(agents):
    effect = Maker(agents.a).uncertain()
    task = effect.task
    task.refresh_from_db()
    activated = as_task(wire.task_wire(task, activated=frozenset({ext.EFFECTS})))
    message = activated["status"]["message"]
    assert message["metadata"] == {ext.EFFECTS: {"uncertain": effect.public_id}}
    assert message["extensions"] == [ext.EFFECTS]
    plain = as_task(wire.task_wire(task))
    assert "metadata" not in plain["status"]["message"]
    assert "arguments" not in str(activated)
    assert "2026.10.06-1" not in str(activated["status"])
