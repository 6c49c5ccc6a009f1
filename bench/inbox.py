"""Server time and SQL queries of the inbox and the REST list over a seeded tenant.

Seed first (bench/inbox_seed.py), then, against the same database:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/countersign_bench \\
      .venv/bin/python bench/inbox.py --tenant inbox-bench --n 50

Each view is requested ``--n`` times (after two warm-up requests) through Django's full
handler and middleware stack in this process (no network, no server in between): the time
measured is the server's, from the request entering the handler to the response leaving it.
Production settings (DEBUG off). Prints p50 / p95 of the wall time, the p50 of the CPU time
the request cost this process (time.thread_time: what is left when the machine is busy)
and the SQL queries of one request.
"""

import argparse
import html
import os
import re
import statistics
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qsl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenant", default="inbox-bench")
    parser.add_argument("--n", type=int, default=50, help="requests per view")
    parser.add_argument("--explain", action="store_true", help="print EXPLAIN ANALYZE of each")
    parser.add_argument("--only", help="only the views whose name starts with this")
    parser.add_argument(
        "--profile", metavar="FILE", help="cProfile the measured requests into FILE (pstats)"
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex)
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    os.environ["SECURE_SSL_REDIRECT"] = "false"
    os.environ["SESSION_COOKIE_SECURE"] = "false"
    os.environ["CSRF_COOKIE_SECURE"] = "false"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from runtime.agents.agent_models import Agent
    from runtime.decisions.decision_models import Interaction
    from tenants.models import ApiToken, Membership, Tenant
    from tenants.tokens import api_token_create

    call_command("collectstatic", "--noinput", verbosity=0)  # hashed names, as in production
    tenant = Tenant.objects.filter(slug=args.tenant).first()
    if tenant is None:
        print(f"No tenant {args.tenant!r}: run bench/inbox_seed.py first.")
        return 2
    membership = Membership.objects.filter(tenant=tenant).select_related("user").first()
    _, token = api_token_create(
        tenant=tenant, subject="program:inbox-bench", name="bench", kind=ApiToken.Kind.OPERATOR
    )
    open_count = Interaction.objects.filter(tenant=tenant, state="open").count()
    decided = Interaction.objects.filter(tenant=tenant).exclude(state="open").count()
    agent = (
        Agent.objects.filter(tenant=tenant, slug="deployer").first()
        or Agent.objects.filter(tenant=tenant).first()
    )

    page = Client()
    page.force_login(membership.user)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    def deep(client, url, params, key):
        """The URL of page 3 of a view (follows its own next links)."""
        for _ in range(2):
            response = client.get(url, params)
            if key == "page":
                nxt = re.search(r'href="\?([^"]*)" rel="next"', response.content.decode())
                params = dict(parse_qsl(html.unescape(nxt.group(1))))
            else:
                nxt = response.json()["next"]
                url, params = nxt, {}
        return url, params

    views = [
        ("inbox", page, "/inbox/", {}),
        ("inbox ?kind=approval", page, "/inbox/", {"kind": "approval"}),
        ("inbox ?kind=uncertain", page, "/inbox/", {"kind": "uncertain"}),
        ("inbox ?agent=" + agent.slug, page, "/inbox/", {"agent": agent.slug}),
        (
            "inbox ?kind=question&agent=code-reviewer",
            page,
            "/inbox/",
            {"kind": "question", "agent": "code-reviewer"},
        ),
        ("inbox page 3", page, *deep(page, "/inbox/", {}, "page")),
        # Search: one column, a trigram index. A common term (one approval in
        # ten goes to production), a rare one (one build), none, and with a filter.
        ("inbox ?q=production", page, "/inbox/", {"q": "production"}),
        ("inbox ?q=b-4242", page, "/inbox/", {"q": "b-4242"}),
        ("inbox ?q=no-such-thing", page, "/inbox/", {"q": "no-such-thing"}),
        ("inbox ?q=staging&kind=approval", page, "/inbox/", {"q": "staging", "kind": "approval"}),
        ("inbox ?q=deployer (agent)", page, "/inbox/", {"q": "deployer"}),
        ("inbox fragment", page, "/inbox/fragment", {}),
        # The tenant's tasks and its audit (one task and several audit rows per item).
        ("tasks", page, "/tasks/", {}),
        ("audit", page, "/audit/", {}),
        ("REST list", api, "/api/v1/interactions", {}),
        ("REST ?state=open", api, "/api/v1/interactions", {"state": "open"}),
        ("REST ?state=answered", api, "/api/v1/interactions", {"state": "answered"}),
        (
            "REST ?state=open&kind=question",
            api,
            "/api/v1/interactions",
            {"state": "open", "kind": "question"},
        ),
        ("REST ?agent=" + agent.slug, api, "/api/v1/interactions", {"agent": agent.slug}),
        ("REST ?limit=200", api, "/api/v1/interactions", {"limit": "200"}),
        ("REST page 3", api, *deep(api, "/api/v1/interactions", {}, "api")),
    ]
    print(
        f"tenant {tenant.slug}: {open_count} open interactions, {decided} decided; "
        f"{args.n} requests per view (server time, in process)"
    )
    print(f"{'view':44} {'p50 ms':>8} {'p95 ms':>8} {'cpu p50':>8} {'queries':>8}  rows")
    worst = 0.0
    if args.only:
        views = [view for view in views if view[0].startswith(args.only)]
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    for name, client, url, params in views:
        for _ in range(2):
            client.get(url, params)
        times, cpu = [], []
        for _ in range(args.n):
            started, started_cpu = time.perf_counter(), time.thread_time()
            if profiler is not None:
                profiler.enable()
            response = client.get(url, params)
            if profiler is not None:
                profiler.disable()
            times.append((time.perf_counter() - started) * 1000)
            cpu.append((time.thread_time() - started_cpu) * 1000)
            assert response.status_code == 200, (name, response.status_code)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url, params)
        if "/api/" in url:
            rows = len(response.json()["results"])
        elif url.startswith("/inbox/"):
            rows = response.content.decode().count('class="card inbox-item"')
        else:
            rows = response.content.decode().count("<tr")
        p50 = statistics.median(times)
        worst = max(worst, p50)
        print(
            f"{name:44} {p50:8.1f} {percentile(times, 95):8.1f} {statistics.median(cpu):8.1f}"
            f" {len(queries.captured_queries):8}"
            f"  {rows}"
        )
        if args.explain:
            with connection.cursor() as cursor:
                for query in queries.captured_queries:
                    if "interaction" in query["sql"] or "effect" in query["sql"]:
                        cursor.execute("EXPLAIN ANALYZE " + query["sql"])
                        print("   ", query["sql"][:300])
                        for (line,) in cursor.fetchall():
                            print("     ", line)
    if profiler is not None:
        profiler.dump_stats(args.profile)
    ApiToken.objects.filter(tenant=tenant, subject="program:inbox-bench").delete()
    print(f"worst p50: {worst:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
