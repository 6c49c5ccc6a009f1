from concurrent.futures import ThreadPoolExecutor

import pytest
from countersign_client import Countersign

from tests.clients.gate_stub import GateStub


@pytest.fixture
def gate():
    stub = GateStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def cs(gate):
    client = Countersign(
        gate.base, gate.token, tenant=gate.tenant, gate=gate.gate, poll_interval=0.05
    )
    yield client
    client.close()


@pytest.fixture
def background():
    """Run a blocking call (a require_approval that waits for people) in a thread."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool.submit
