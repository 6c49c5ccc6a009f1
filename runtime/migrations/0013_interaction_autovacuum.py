"""Vacuum runtime_interaction after 2% of its rows changed instead of PostgreSQL's 20%.

The inbox's open counts per agent and kind (runtime.selectors.agents_with_open_counts) are
read from the partial index interaction_open_by_agent alone, but an index-only scan skips
the table only for pages the visibility map marks all-visible, and only VACUUM marks them.
Every decision updates an interaction and every pause inserts one, each clearing or adding
a page that is not all-visible; at the default scale factors a tenant with 110,000
interactions went 22,000 changes between vacuums, and the planner, seeing few all-visible
pages, counted 10,000 open interactions through another index and the table: 10.6 ms
against 3.1 ms (bench/README.md, "The inbox at scale"). A vacuum of this table after a
few thousand changes costs PostgreSQL a few milliseconds of its own time. Other databases
have no such setting.
"""

from django.db import migrations

TABLE = "runtime_interaction"
SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
}


def autovacuum_set(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    options = ", ".join(f"{name} = {value}" for name, value in SETTINGS.items())
    schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(TABLE)} SET ({options})")


def autovacuum_reset(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"ALTER TABLE {schema_editor.quote_name(TABLE)} RESET ({', '.join(SETTINGS)})"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0012_interaction_agent_required"),
    ]

    operations = [
        migrations.RunPython(autovacuum_set, autovacuum_reset, elidable=False),
    ]
