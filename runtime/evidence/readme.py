"""The README of an evidence pack: what each file is, in plain words, and what record-keeping,
human-oversight and change-management duties it is evidence for."""

from datetime import datetime

README = """# Evidence pack: {tenant}, {since} to {until}

Countersign puts a person between AI agents and the actions they take. This archive is the
record of one period of one organisation ("tenant"): what the agents asked to do, who
decided, under which policy, and a log that shows nothing was removed or changed.

## What is in it

| file | what it is |
|---|---|
| `receipts.jsonl` | One line per decision on an action an agent wanted to take: the tool, the SHA-256 of the exact arguments shown to the person and of those sent, the arguments themselves (fields the policy keeps private as `•••`), what approving does in words (`impact`), who decided, how (page, REST, Slack, e-mail, a standing rule), when, and the version of the policy rule that held the action. A receipt's signature is in it where receipts are signed. |
| `audit.jsonl` | Every audit row of the period: each decision and change (policy changes, members, rules, expiries), in the order written. Each row carries the SHA-256 of its own fields and of the row before it (a hash chain): a row removed or edited breaks the chain. |
| `policies/<agent>/*.json` | Every version of each agent's tool policy that was in force at some moment of the period, with when it came into force and when it was replaced. |
| `members.jsonl` | Who decided: each person's role and approver groups (as they are when the pack was made), and programs, rules and the system by kind. |
| `receipt-keys.json` | The public keys that sign receipts and this manifest (a JWKS, as the operator's server publishes at `/.well-known/jwks.json`). |
| `manifest.json` | The SHA-256 of every file and of every receipt, where the audit piece starts and ends in the tenant's chain, and the id (`keyId`) of the key that signed it. |
| `manifest.jws` | The signature of `manifest.json`: a compact JWS (EdDSA, Ed25519) whose payload is the manifest and whose header names the key (`kid`). |

## How to check it

Run `python manage.py evidence verify PACK.zip --key jwks.json` (the operator's published
JWKS, `/.well-known/jwks.json`, saved; or the signing key's `x` from it), so that a pack
signed by anyone else fails. It checks the manifest's signature,
the hash of every file and receipt, the receipts' own signatures where present, that the
audit rows form an unbroken chain from where the manifest says it starts to where it ends,
and that each policy file is the version it names; it names the first thing that does not
hold. Without the server: any JOSE library checks `manifest.jws` against
`receipt-keys.json`; each hash is SHA-256 over the file's bytes; a receipt's is over its
line; the audit chain's formula is in the project's `runtime/kernel/audit_hash.py`.

## What duty each part is evidence for

- **EU AI Act, Article 12 (record-keeping).** High-risk AI systems must automatically record
  events over their lifetime, so that their functioning can be traced. `audit.jsonl` and
  `receipts.jsonl` are those records for the actions the agents took or were refused; the
  hash chain and the signed manifest show they are complete and unaltered for the period.
- **EU AI Act, Article 14 (human oversight).** Natural persons must be able to oversee the
  system, decide not to use its output, and intervene. Each receipt shows that a named
  person (or a rule a person made) decided on the exact action before it ran, what they
  were shown, and whether they approved, denied, or let it expire; `members.jsonl` shows
  that those people held the role the policy required.
- **SOC 2 (CC8.1, change management).** Changes are authorised, recorded and tested before
  they take effect. `policies/` holds every version of the rules that were in force, with
  when each took effect; the audit rows name who changed a policy and when
  (`policy.changed`), and each receipt names the policy version it was decided under.
"""


def readme_text(*, tenant: str, since: datetime, until: datetime) -> str:
    return README.format(tenant=tenant, since=since.isoformat(), until=until.isoformat())
