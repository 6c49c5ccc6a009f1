"""The two 0.3 clients the interop suite drives: the a2a-sdk 1.3's 0.3 compatibility transport
(Partner03, in this process) and the a2a-sdk 0.3 client itself (client03, run with the
interpreter of .venv-sdk03 on tests/interop/sdk03/client03.py, since both SDKs are the
package ``a2a``)."""

import json
import subprocess

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport

from tests.live import ROOT
from tests.sdk_client import Partner

PYTHON03 = ROOT / ".venv-sdk03" / "bin" / "python"
CLIENT03 = ROOT / "tests" / "interop" / "sdk03" / "client03.py"


class Partner03(Partner):
    """A partner whose client speaks 0.3: the card's 1.0 interface is left out, as a card
    of a 0.3-only server would have it, and the SDK picks its 0.3 transport."""

    def __init__(self, base_url: str, token: str):
        super().__init__(base_url, token)
        self.requests: list[tuple[str, str]] = []

        async def record(request):
            if request.method == "POST":
                body = json.loads(request.content)
                self.requests.append((body["method"], request.headers.get("A2A-Version", "")))

        self.http.event_hooks["request"].append(record)

    def client(self, agent_path: str, *, polling: bool = False, streaming: bool = False):
        key = (agent_path, polling, streaming)
        if key not in self._clients:

            async def make():
                resolver = A2ACardResolver(self.http, f"{self.base_url}{agent_path}")
                card = await resolver.get_agent_card()
                legacy = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
                del card.supported_interfaces[:]
                card.supported_interfaces.extend(legacy)
                config = ClientConfig(httpx_client=self.http, polling=polling, streaming=streaming)
                return ClientFactory(config).create(card)

            self._clients[key] = self.run(make())
            assert isinstance(self._clients[key]._transport, CompatJsonRpcTransport)
        return self._clients[key]


def client03(command: dict) -> dict:
    """Run one command of the 0.3 client and return its JSON answer."""
    assert PYTHON03.exists(), "the a2a-sdk 0.3 client's virtualenv is missing: run `make install`"
    done = subprocess.run(
        [str(PYTHON03), str(CLIENT03)],
        input=json.dumps(command),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)
