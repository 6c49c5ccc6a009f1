"""The evidence pack: `manage.py evidence export` writes a period of a tenant's record (receipts,
audit rows, the policies in force, who decided) as one signed archive; `evidence verify`
checks it offline and names the first thing that does not hold."""

import base64
import hashlib
import json
import zipfile
from datetime import timedelta
from io import StringIO

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import CommandError, call_command
from django.utils import timezone

from runtime.agents.agent_models import Agent, PolicyVersion
from runtime.agents.policy_history import policy_set
from runtime.decisions.decision_models import Receipt, SigningKey
from runtime.decisions.receipts import policy_version
from runtime.decisions.signing import jwks
from runtime.evidence.verify import pack_verify, receipt_signature_problem
from tests.core import Maker, decide

pytestmark = pytest.mark.django_db


@pytest.fixture
def pack(agents, tmp_path):
    """acme's pack of the last day: three decisions, a policy change after the first."""
    make = Maker(agents.a)
    decide(make.approval(build="b-1"), approved=True)
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    policy_set(
        agent=agent,
        tool_policy={**agent.tool_policy, "deploy/rollback": "approve"},
        ladder=agent.ladder,
        actor="user:admin@acme.test",
        source="admin",
        via="admin",
    )
    decide(make.approval(build="b-2"), approved=False, reason="not today")
    decide(make.approval(build="b-3"), approved=True)
    make_b = Maker(agents.b)
    decide(make_b.approval(build="theirs"), approved=True)
    path = tmp_path / "acme.zip"
    out = StringIO()
    call_command(
        "evidence", "export", "--tenant", "acme", "--since", "1d", "--out", str(path), stdout=out
    )
    assert "Wrote" in out.getvalue() and "3 receipts" in out.getvalue()
    return path


def verify(path, *more) -> str:
    out = StringIO()
    call_command("evidence", "verify", str(path), *more, stdout=out)
    return out.getvalue()


def files_of(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def rewrite(path, changed: dict[str, bytes | None]):
    """The pack with some files replaced (None: removed), its manifest left as it was."""
    files = files_of(path)
    for name, body in changed.items():
        if body is None:
            files.pop(name)
        else:
            files[name] = body
    tampered = path.with_name("tampered.zip")
    with zipfile.ZipFile(tampered, "w") as archive:
        for name, body in files.items():
            archive.writestr(name, body)
    return tampered


def failure(path, *more) -> str:
    with pytest.raises(CommandError) as failed:
        verify(path, *more)
    assert failed.value.returncode == 1
    return str(failed.value)


def test_an_exported_pack_holds_the_period_and_verifies(agents, pack):
    files = files_of(pack)
    manifest = json.loads(files["manifest.json"])
    receipts = [json.loads(line) for line in files["receipts.jsonl"].splitlines()]
    assert {r["decision"] for r in receipts} == {"approved", "denied"}
    assert "theirs" not in files["receipts.jsonl"].decode()  # tenant B's stays out
    audit = [json.loads(line) for line in files["audit.jsonl"].splitlines()]
    assert {"approved", "denied"} <= {row["action"] for row in audit}
    assert manifest["auditChain"]["rows"] == len(audit)
    policies = sorted(name for name in files if name.startswith("policies/deployer/"))
    assert len(policies) == 2  # the policy before the change and after it: both in force
    before, after = (json.loads(files[name]) for name in policies)
    assert before["inForceUntil"] == after["inForceFrom"] and after["inForceUntil"] is None
    assert "deploy/rollback" in after["policy"] and "deploy/rollback" not in before["policy"]
    members = [json.loads(line) for line in files["members.jsonl"].splitlines()]
    operator = next(m for m in members if m["subject"] == "user:operator@acme.test")
    assert (operator["role"], operator["decisions"]) == ("operator", 3)
    readme = files["README.md"].decode()
    assert "Article 12" in readme and "Article 14" in readme and "CC8.1" in readme
    for name, digest in manifest["files"].items():
        assert hashlib.sha256(files[name]).hexdigest() == digest
    assert "The pack verifies: 3 receipts" in verify(pack)
    # Signed with the receipt signing key: its kid in the manifest and the JWS, its public
    # key in the pack's JWKS, the same as the server publishes.
    header = json.loads(b64url_decode(files["manifest.jws"].decode().split(".")[0]))
    assert header["kid"] == manifest["keyId"] == SigningKey.objects.get(active=True).kid
    assert header["alg"] == "EdDSA"
    assert json.loads(files["receipt-keys.json"]) == jwks()
    assert "verifies" in verify(pack, "--key", signing_x())
    published = pack.with_name("jwks.json")
    published.write_text(json.dumps(jwks()))
    assert "verifies" in verify(pack, "--key", str(published))


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def signing_x() -> str:
    """The active receipt signing key's public key, as the server's JWKS lists it."""
    return SigningKey.objects.get(active=True).public_x


def jws_of(body: bytes, key: Ed25519PrivateKey, kid: str) -> bytes:
    header = b64url(json.dumps({"alg": "EdDSA", "kid": kid}).encode())
    payload = b64url(body)
    return f"{header}.{payload}.{b64url(key.sign(f'{header}.{payload}'.encode()))}".encode()


def test_a_removed_audit_row_is_named(pack):
    files = files_of(pack)
    lines = files["audit.jsonl"].splitlines(keepends=True)
    removed = json.loads(lines[1])
    tampered = rewrite(pack, {"audit.jsonl": b"".join(lines[:1] + lines[2:])})
    problem = failure(tampered)
    assert "audit.jsonl does not match the manifest's SHA-256" in problem
    assert f"row {removed['seq']} of the chain is missing (removed)" in problem


def test_an_altered_receipt_is_named(pack):
    files = files_of(pack)
    lines = files["receipts.jsonl"].splitlines(keepends=True)
    receipt = json.loads(lines[0])
    receipt["decider"] = "user:admin@acme.test"
    altered = json.dumps(receipt, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    tampered = rewrite(pack, {"receipts.jsonl": altered.encode() + b"\n" + b"".join(lines[1:])})
    problem = failure(tampered)
    assert f"receipt {receipt['public_id']} was altered" in problem


def test_a_changed_policy_file_is_named(pack):
    files = files_of(pack)
    name = sorted(n for n in files if n.startswith("policies/"))[0]
    document = json.loads(files[name])
    document["policy"]["deploy/deploy_build"] = "allow"
    tampered = rewrite(pack, {name: json.dumps(document).encode()})
    problem = failure(tampered)
    assert f"{name} does not match the manifest's SHA-256: the policy file was changed" in problem


def test_a_manifest_changed_or_signed_by_another_key_fails(pack):
    files = files_of(pack)
    manifest = json.loads(files["manifest.json"])
    kid = manifest["keyId"]
    # The files' hashes brought in line with a removed row, the signature left as it was.
    lines = files["audit.jsonl"].splitlines(keepends=True)
    audit = b"".join(lines[:1] + lines[2:])
    manifest["files"]["audit.jsonl"] = hashlib.sha256(audit).hexdigest()
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    problem = failure(rewrite(pack, {"audit.jsonl": audit, "manifest.json": body}))
    assert "manifest.jws is the signature of another manifest than manifest.json" in problem
    # Re-signed by another key under the server's kid: the pack's JWKS does not hold it.
    forger = Ed25519PrivateKey.generate()
    changed = {
        "audit.jsonl": audit,
        "manifest.json": body,
        "manifest.jws": jws_of(body, forger, kid),
    }
    assert "manifest.jws does not verify" in failure(rewrite(pack, changed))
    # ...and with the pack's JWKS swapped for one of the forger's own, it verifies only for
    # who does not pin the server's key...
    keys = {
        "keys": [
            {
                "kty": "OKP",
                "crv": "Ed25519",
                "kid": kid,
                "x": b64url(forger.public_key().public_bytes_raw()),
            }
        ]
    }
    jwks_body = json.dumps(keys).encode()
    manifest["files"]["receipt-keys.json"] = hashlib.sha256(jwks_body).hexdigest()
    body = json.dumps(manifest, indent=2, sort_keys=True).encode()
    forged = rewrite(
        pack,
        {
            "audit.jsonl": audit,
            "receipt-keys.json": jwks_body,
            "manifest.json": body,
            "manifest.jws": jws_of(body, forger, kid),
        },
    )
    assert "signed by another key than the one given" in failure(forged, "--key", signing_x())
    # ...and even then the receipts, signed by the server's key, do not verify under it.
    assert "its signature does not verify" in pack_verify(forged).problem
    # A kid the pack's JWKS does not name.
    other = json.loads(files["manifest.json"])
    other["keyId"] = "rk_nobody"
    body = json.dumps(other, indent=2, sort_keys=True).encode()
    problem = failure(
        rewrite(pack, {"manifest.json": body, "manifest.jws": jws_of(body, forger, "rk_nobody")})
    )
    assert "the manifest's signing key rk_nobody is not in the pack (receipt-keys.json)" in problem


def test_a_pack_of_the_old_format_says_so(pack):
    files = files_of(pack)
    old = rewrite(pack, {"manifest.jws": None, "manifest.sig": b"c2lnbmF0dXJl\n"})
    assert "an old-format manifest (manifest.sig" in failure(old)
    assert files["manifest.jws"].count(b".") == 2


def test_a_file_added_or_removed_fails(pack):
    assert "not in the manifest (added)" in failure(rewrite(pack, {"extra.txt": b"x"}))
    assert "(removed)" in failure(rewrite(pack, {"members.jsonl": None}))
    assert "no manifest" in failure(rewrite(pack, {"manifest.jws": None}))


def test_a_receipts_signature_is_checked_where_it_has_one():
    key = Ed25519PrivateKey.generate()

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "EdDSA", "kid": "k1"}).encode())
    payload = b64(json.dumps({"receipt_id": "rcp_1", "arguments_sha256": "ab"}).encode())
    signature = b64(key.sign(f"{header}.{payload}".encode()))
    keys = {"k1": key.public_key()}
    record = {
        "public_id": "rcp_1",
        "sent_arguments_hash": "ab",
        "jws": f"{header}.{payload}.{signature}",
    }
    assert receipt_signature_problem(record, keys) is None
    assert receipt_signature_problem({"public_id": "rcp_1"}, keys) is None  # unsigned
    assert "another receipt" in receipt_signature_problem({**record, "public_id": "rcp_2"}, keys)
    other = {**record, "sent_arguments_hash": "cd"}
    assert "other arguments" in receipt_signature_problem(other, keys)
    forged = f"{header}.{b64(json.dumps({'receipt': 'rcp_1', 'x': 1}).encode())}.{signature}"
    assert "does not verify" in receipt_signature_problem({**record, "jws": forged}, keys)
    assert "not in the pack" in receipt_signature_problem(record, {})


def test_an_agent_made_by_any_path_has_its_first_policy_version(agents):
    agent = Agent.objects.get(tenant=agents.a.tenant, slug="deployer")
    [first] = PolicyVersion.objects.filter(agent=agent)
    assert first.version == policy_version(agent) and first.tool_policy == agent.tool_policy
    agent.save()  # a save that changes nothing keeps no version more
    assert PolicyVersion.objects.filter(agent=agent).count() == 1
    policy_set(
        agent=agent,
        tool_policy={"deploy": "deny"},
        ladder=agent.ladder,
        actor="user:admin@acme.test",
        source="admin",
        via="admin",
    )
    assert PolicyVersion.objects.filter(agent=agent).count() == 2


def test_bad_dates_and_an_unknown_tenant_are_refused(agents, tmp_path):
    for args in (["--tenant", "nope", "--since", "1d"], ["--tenant", "acme", "--since", "soon"]):
        with pytest.raises(CommandError):
            call_command("evidence", "export", *args, "--out", str(tmp_path / "x.zip"))
    with pytest.raises(CommandError, match="after"):
        call_command(
            "evidence",
            "export",
            "--tenant",
            "acme",
            "--since",
            "1d",
            "--until",
            "2d",
            "--out",
            str(tmp_path / "x.zip"),
        )
    assert not Receipt.objects.filter(created_at__gt=timezone.now() + timedelta(days=1)).exists()


def test_the_admin_action_downloads_a_pack_of_the_selected_period_that_verifies(agents, tmp_path):
    from runtime.kernel.task_models import AuditEvent
    from tests.admin_pages import tenant_admin_client

    make = Maker(agents.a)
    decide(make.approval(build="b-1"), approved=True)
    decide(Maker(agents.b).approval(build="theirs"), approved=True)
    client = tenant_admin_client(agents.a)
    mine = list(AuditEvent.objects.filter(tenant=agents.a.tenant).values_list("pk", flat=True))
    theirs = AuditEvent.objects.filter(tenant=agents.b.tenant).values_list("pk", flat=True)
    url = "/admin/runtime/auditevent/"
    response = client.post(url, {"action": "evidence_export", "_selected_action": [*mine, *theirs]})
    # A tenant's admin selects within their own tenant only: tenant B's rows are not found.
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    path = tmp_path / "from-admin.zip"
    path.write_bytes(response.content)
    assert pack_verify(path).holds
    assert "theirs" not in files_of(path)["receipts.jsonl"].decode()
    assert "b-1" in files_of(path)["receipts.jsonl"].decode()
