"""The path of one decision through the code: one browser decision (the decision page's POST)
and one REST decision (POST /api/v1/interactions/<id>/answer), each an approval of the demo
deployer's held ``deploy / deploy_build`` call on a seeded demo tenant.

For each request it records, with ``sys.setprofile``, every Python function called while the
request runs in this process (Django's test client, so the middleware, the view, the
decision's transaction and its after-commit callbacks; the resumed turn is only queued, by
name, on a queue no worker reads) and prints:

- **calls**: the calls of product functions (a function whose file is in one of the apps of
  tests/test_architecture.py's ``APPS``, migrations aside), each time it is called; a
  comprehension or generator expression is no call of its own, and a generator's resumption
  is no new call;
- **functions**: the distinct product functions among them;
- **modules**: the distinct product modules those functions are in;
- **back up**: the calls against the layer order: a product function called while the
  nearest product function below it on the stack (its caller in product code, with any
  framework code between them: a signal's dispatch, ``transaction.on_commit``) is in a lower
  layer. The layers are tests/test_architecture.py's: the apps' (``layer_of``: base, below,
  core, edges, URLs), and inside ``runtime`` the core's sub-packages (``core_layer_of``:
  the schema, kernel, tools, policy, llm, agents, decisions, turn, the app's own modules); a
  module ranks by (app layer, core sub-layer). A return from a lower layer into a higher one
  is the normal way back and is not counted; an arrow up is a callback: a signal's receiver
  in an edge, a callable handed down and called below;
- **policy lookups**: the calls of ``runtime.policy.rules.policy_rule_for`` (which rule of the
  tool policy holds the call), the one reading every other policy read goes through.

``--list`` prints each request's product functions in the order first called, with their
call counts, and the arrows up.

Both requests run once first, on other approvals, so that the figures are those of a warm
process (no import, no first-use cache fill); the caches of token and agent rows are emptied
before each measured request, so the REST decision reads its token as a first request does.

Run by hand, never in the test run (see bench/README.md). It makes its own database (the
test database of the one ``DATABASE_URL`` names, as pytest-django does) and drops it at the
end:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/9 .venv/bin/python bench/decision_path.py
"""

import argparse
import os
import sys
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# A queue of this run's own: no worker runs the turns the decisions queue.
os.environ["CELERY_QUEUE"] = f"bench-decision-path-{uuid.uuid4().hex[:8]}"

from tests.test_architecture import APPS, core_layer_of, layer_of  # noqa: E402

COMPREHENSIONS = {"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"}
GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR
POLICY_LOOKUP = ("runtime.policy.rules", "policy_rule_for")


def module_of(filename: str, cache: dict[str, str | None] = {}) -> str | None:  # noqa: B006
    """The product module a code object's file is, or None for any other code."""
    if filename in cache:
        return cache[filename]
    name = None
    path = Path(filename)
    if path.is_absolute() and path.suffix == ".py":
        try:
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
        except ValueError:
            parts = []
        if parts and parts[0] in APPS and "migrations" not in parts:
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
    cache[filename] = name
    return name


def rank(module: str) -> tuple[int, int]:
    """A module's place in the layers: (the app's layer, the core sub-layer or 0)."""
    return layer_of(module), core_layer_of(module) or 0


@dataclass
class Path_:
    """What one request called."""

    calls: int = 0
    functions: Counter = field(default_factory=Counter)
    modules: set = field(default_factory=set)
    back_up: list = field(default_factory=list)
    policy_lookups: int = 0


def traced(run) -> Path_:
    """Run ``run()`` under the profiler and say what product code it called."""
    found = Path_()
    started: set[int] = set()  # generator frames already entered (kept alive in ``frames``)
    frames: list = []

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        module = module_of(code.co_filename)
        if module is None or code.co_name in COMPREHENSIONS:
            return
        if code.co_flags & GENERATOR_FLAGS:
            if id(frame) in started:
                return  # resumed, not called
            started.add(id(frame))
            frames.append(frame)
        found.calls += 1
        name = f"{module}.{code.co_qualname}"
        found.functions[name] += 1
        found.modules.add(module)
        if (module, code.co_name) == POLICY_LOOKUP:
            found.policy_lookups += 1
        caller = frame.f_back
        while caller is not None:
            below = module_of(caller.f_code.co_filename)
            if below is not None and caller.f_code.co_name not in COMPREHENSIONS:
                if rank(below) < rank(module):
                    found.back_up.append(f"{below}.{caller.f_code.co_qualname} -> {name}")
                break
            caller = caller.f_back

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return found


def setup():
    import django

    django.setup()
    from django.db import connection
    from django.test.utils import setup_test_environment

    setup_test_environment()
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    return connection, name


def seed() -> dict:
    import io
    import json

    from django.core.management import call_command

    out = io.StringIO()
    call_command("seed_demo", "--json", stdout=out)
    return json.loads(out.getvalue())


def held_approval(tenant, subject: str):
    """A deployer task of the demo tenant paused on its held deploy call (its turn run here)."""
    from runtime.agents.agent_models import Agent
    from runtime.decisions.decision_models import Effect, Interaction
    from runtime.turn.intake import message_send
    from runtime.turn.runner import turn_run

    agent = Agent.objects.get(tenant=tenant, slug="deployer")
    build = uuid.uuid4().hex[:8]
    task = message_send(
        tenant=tenant,
        agent=agent,
        subject=subject,
        message={
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_USER",
            "parts": [{"text": f"deploy build {build} to staging"}],
        },
    ).task
    turn_run(task_pk=task.pk, worker_id="bench")
    interaction = Interaction.objects.get(task=task, state=Interaction.State.OPEN)
    effect = Effect.objects.get(tenant=tenant, public_id=interaction.public_id)
    return interaction, effect.arguments_hash


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print each path's functions")
    args = parser.parse_args()
    connection, name = setup()
    try:
        run(args)
    finally:
        connection.creation.destroy_test_db(name, verbosity=0)


def run(args) -> None:
    from django.test import Client

    from a2a_endpoint.identity import agent_cache
    from runtime.decisions.decision_models import Interaction
    from tenants.models import Tenant, User
    from tenants.tokens import token_cache

    demo = seed()
    tenant = Tenant.objects.get(slug=demo["tenant"])
    browser = Client()
    browser.force_login(User.objects.get(email=demo["logins"]["operator"]["email"]))
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {demo['operator_token']}"}

    def page(interaction, shown_hash):
        response = browser.post(
            f"/inbox/{interaction.public_id}/",
            {"decision": "approve", "reason": "", "shown_hash": shown_hash},
        )
        assert response.status_code == 302, response.content[:500]

    program = Client()

    def rest(interaction, shown_hash):
        response = program.post(
            f"/api/v1/interactions/{interaction.public_id}/answer",
            {"approved": True, "argumentsHash": shown_hash},
            content_type="application/json",
            **bearer,
        )
        assert response.status_code == 200, response.content[:500]

    found = {}
    for label, decide in (("browser (page POST)", page), ("REST", rest)):
        decide(*held_approval(tenant, demo["subject"]))  # warm up
        interaction, shown_hash = held_approval(tenant, demo["subject"])
        token_cache.clear()
        agent_cache.clear()
        found[label] = traced(lambda: decide(interaction, shown_hash))  # noqa: B023
        interaction.refresh_from_db()
        assert interaction.state == Interaction.State.ANSWERED, interaction.state
    print(f"{'decision':<22}{'calls':>7}{'functions':>11}{'modules':>9}{'back up':>9}{'policy':>8}")
    for label, path in found.items():
        print(
            f"{label:<22}{path.calls:>7}{len(path.functions):>11}{len(path.modules):>9}"
            f"{len(path.back_up):>9}{path.policy_lookups:>8}"
        )
    if args.list:
        for label, path in found.items():
            print(f"\n{label}: {len(path.modules)} modules")
            for module in sorted(path.modules):
                print(f"  {module}")
            print("functions (calls):")
            for function, count in path.functions.items():
                print(f"  {count:>3} {function}")
            print("back up:")
            for arrow in path.back_up:
                print(f"  {arrow}")


if __name__ == "__main__":
    main()
