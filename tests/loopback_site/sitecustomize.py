"""Loaded by every Python process the suite starts (tests/conftest.py puts this folder on
PYTHONPATH for the run): the live stack's uvicorn and Celery worker, and the commands the
suite runs, refuse non-loopback lookups as the test process does (tests/loopback.py), and
append what they refuse to the file that LOOPBACK_ONLY_REPORT names, which the test
process reads after each test."""

import os
import sys

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.environ.get("LOOPBACK_ONLY_REPORT"):
    sys.path.insert(0, _root)
    try:
        from tests import loopback
    finally:
        sys.path.remove(_root)
    loopback.install(
        loopback.LoopbackOnly(
            allowed=loopback.service_hosts(), report=os.environ["LOOPBACK_ONLY_REPORT"]
        )
    )
