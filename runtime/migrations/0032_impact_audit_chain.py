"""Impact lines on interactions and receipts; what a shadow rule would have done with a call; agents' policy versions (each agent's policy
now kept as its first); the audit chain (runtime.kernel.audit_hash):
its columns, each tenant's head, the rows there were linked in the order they were written,
and on PostgreSQL the deferred trigger that links each new row when its transaction
commits (runtime.kernel.audit says why at the commit)."""

import hashlib
import json
from datetime import datetime

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

# The link, made at the commit of the transaction that wrote the row: the tenant's head is
# locked (made when missing), the row gets its place, the hash before it and its chain hash
# (SHA-256 of the previous hash's hex then its content hash's hex), the head moves on.
LINK_FUNCTION = """
CREATE OR REPLACE FUNCTION runtime_audit_chain_link() RETURNS trigger AS $$
DECLARE
    previous_seq bigint;
    previous_hash text;
    linked text;
BEGIN
    -- A row gone by the commit (its tenant deleted in the same transaction) has no place.
    PERFORM 1 FROM runtime_auditevent WHERE id = NEW.id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO runtime_auditchainhead (tenant_id, seq, hash)
        VALUES (NEW.tenant_id, 0, '') ON CONFLICT (tenant_id) DO NOTHING;
    SELECT seq, hash INTO previous_seq, previous_hash FROM runtime_auditchainhead
        WHERE tenant_id = NEW.tenant_id FOR UPDATE;
    linked := encode(sha256(convert_to(previous_hash || NEW.content_hash, 'UTF8')), 'hex');
    UPDATE runtime_auditchainhead SET seq = previous_seq + 1, hash = linked
        WHERE tenant_id = NEW.tenant_id;
    UPDATE runtime_auditevent
        SET chain_seq = previous_seq + 1, prev_hash = previous_hash, chain_hash = linked
        WHERE id = NEW.id;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""
LINK_TRIGGER = """
CREATE CONSTRAINT TRIGGER runtime_audit_chain_link
    AFTER INSERT ON runtime_auditevent
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.chain_seq IS NULL)
    EXECUTE FUNCTION runtime_audit_chain_link();
"""
UNLINK = """
DROP TRIGGER IF EXISTS runtime_audit_chain_link ON runtime_auditevent;
DROP FUNCTION IF EXISTS runtime_audit_chain_link();
"""


def _content_hash(row) -> str:
    # runtime.kernel.audit_hash.content_digest as it was written with this migration.
    created = row.created_at
    fields = {
        "action": row.action,
        "actor": row.actor,
        "createdAt": created.isoformat() if isinstance(created, datetime) else str(created),
        "detail": row.detail if row.detail is not None else {},
        "interaction": row.interaction_id,
        "task": row.task_id,
        "via": row.via,
    }
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def link_rows_there_were(apps, schema_editor):
    AuditEvent = apps.get_model("runtime", "AuditEvent")
    AuditChainHead = apps.get_model("runtime", "AuditChainHead")
    tenants = AuditEvent.objects.values_list("tenant_id", flat=True).distinct()
    for tenant_id in list(tenants):
        seq, previous = 0, ""
        rows = AuditEvent.objects.filter(tenant_id=tenant_id).order_by("created_at", "id")
        for row in rows.iterator(chunk_size=2000):
            content = _content_hash(row)
            linked = hashlib.sha256(f"{previous}{content}".encode()).hexdigest()
            seq += 1
            AuditEvent.objects.filter(pk=row.pk).update(
                content_hash=content, chain_seq=seq, prev_hash=previous, chain_hash=linked
            )
            previous = linked
        AuditChainHead.objects.create(tenant_id=tenant_id, seq=seq, hash=previous)
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(LINK_FUNCTION)
        schema_editor.execute(LINK_TRIGGER)


def unlink(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(UNLINK)


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0031_gateway_calls"),
        ("tenants", "0006_tenant_time_zone"),
    ]

    operations = [
        migrations.AddField(
            model_name="interaction",
            name="impact",
            field=models.CharField(blank=True, default="", editable=False, max_length=320),
        ),
        migrations.AddField(
            model_name="effect",
            name="shadow",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="receipt",
            name="impact",
            field=models.CharField(
                blank=True, default="", help_text="What approving the call does.", max_length=320
            ),
        ),
        migrations.CreateModel(
            name="AuditChainHead",
            fields=[
                (
                    "tenant",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        serialize=False,
                        to="tenants.tenant",
                    ),
                ),
                ("seq", models.BigIntegerField(default=0)),
                ("hash", models.CharField(blank=True, default="", max_length=64)),
            ],
        ),
        migrations.AddField(
            model_name="auditevent",
            name="chain_hash",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="chain_seq",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="content_hash",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="prev_hash",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddIndex(
            model_name="auditevent",
            index=models.Index(fields=["tenant", "chain_seq"], name="audit_chain"),
        ),
        migrations.RunPython(link_rows_there_were, unlink),
    ]
