"""Evidence packs: a period of a tenant's record (receipts, audit rows, the policies in force,
who decided) in one signed archive an auditor checks offline (runtime.evidence.verify)."""
