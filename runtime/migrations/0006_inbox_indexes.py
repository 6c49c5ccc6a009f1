"""The inbox at scale: keyset indexes for the inbox and the REST list.

Each page is newest first by (created_at, id); with these an index scan reads the page's
rows in order and stops, instead of sorting the tenant's interactions. ``interaction_inbox``
(tenant, state, created_at) is replaced by the same with the id as the tie-breaker.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0005_credentials_prices"),
        ("tenants", "0002_apitoken_kind"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="interaction", name="interaction_inbox"),
        migrations.AddIndex(
            model_name="interaction",
            index=models.Index(
                fields=["tenant", "-created_at", "-id"], name="interaction_tenant_keyset"
            ),
        ),
        migrations.AddIndex(
            model_name="interaction",
            index=models.Index(
                fields=["tenant", "state", "-created_at", "-id"], name="interaction_state_keyset"
            ),
        ),
        migrations.AddIndex(
            model_name="interaction",
            index=models.Index(
                condition=models.Q(("state", "open")),
                fields=["tenant", "kind", "-created_at", "-id"],
                name="interaction_open_by_kind",
            ),
        ),
    ]
