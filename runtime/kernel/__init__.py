"""The kernel of the core: a task's state and its one writer, wake-ups, the store (the core's
hand-written SQL, with the models under every service), push notifications, the A2A shapes
the core stores, extensions, errors, files and the audit trail. It imports nothing of the
core's other sub-packages but their models (tests/test_architecture.py)."""
