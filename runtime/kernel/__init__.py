"""The kernel of the core: a task's state and its one writer, wake-ups, hand-written SQL,
the A2A shapes the core stores, extensions, errors, files and the audit trail. It imports
nothing of the core's other sub-packages (tests/test_architecture.py)."""
