"""The reverse-proxy examples of deploy/ (nginx and Caddy), as written, in front of a live stack:
over TLS (a certificate made here), an A2A stream's frames reach the client while the stream
is still open, before anything ends it, and the REST API answers through the same proxy.
Only the addresses and the certificate's paths are changed for the test: the directives that
decide buffering and timeouts are the file's.

Where the proxy is not installed the test says so and skips (`apt-get install nginx caddy`;
.ci/run installs both, and in CI a missing one fails)."""

import datetime
import ipaddress
import json
import os
import re
import shutil
import ssl
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.live import ROOT, free_port, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

DEPLOY = ROOT / "deploy"
HELD = "deploy build 2026.10.06-1 to staging"


def program(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"no {name} on this machine; .ci/run installs Debian's {name} package")
        pytest.skip(f"{name} is not installed (apt-get install {name})")
    return found


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class Proxy:
    def __init__(self, command: list[str], folder: Path, port: int, env: dict | None = None):
        self.log = folder / "proxy.log"
        self.url = f"https://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            command,
            cwd=folder,
            env={**os.environ, **(env or {})},
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def up():
            assert self.process.poll() is None, self.log.read_text()
            try:
                return httpx.get(f"{self.url}/healthz", verify=False, timeout=2).status_code
            except httpx.HTTPError:
                return False

        assert wait_until(up, 30, what="the proxy") == 200

    def stop(self):
        self.process.terminate()
        self.process.wait(15)


def nginx_proxy(folder: Path, upstream: int) -> Proxy:
    """deploy/nginx/countersign.conf, on loopback ports, in front of the live stack."""
    nginx = program("nginx")
    cert, key = certificate(folder)
    http_port, https_port = free_port(), free_port()
    site = (DEPLOY / "nginx" / "countersign.conf").read_text()
    site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream};")
    site = re.sub(r"^\s*listen \[::\].*\n", "", site, flags=re.M)
    site = site.replace("listen 80;", f"listen 127.0.0.1:{http_port};")
    site = site.replace("listen 443 ssl", f"listen 127.0.0.1:{https_port} ssl")
    site = re.sub(r"ssl_certificate\s+\S+;", f"ssl_certificate {cert};", site)
    site = re.sub(r"ssl_certificate_key\s+\S+;", f"ssl_certificate_key {key};", site)
    assert "proxy_buffering off;" in site  # the example's own directives stay
    (folder / "countersign.conf").write_text(site)
    temp = "\n".join(
        f"    {kind}_temp_path {folder / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (folder / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"daemon off;\npid {folder / 'nginx.pid'};\nerror_log {folder / 'error.log'} info;\n"
        + "worker_processes 1;\nevents {}\nhttp {\n    access_log off;\n"
        + f"{temp}\n    include {folder / 'countersign.conf'};\n}}\n"
    )
    return Proxy([nginx, "-c", str(folder / "nginx.conf"), "-p", str(folder)], folder, https_port)


def caddy_proxy(folder: Path, upstream: int) -> Proxy:
    """deploy/caddy/Caddyfile, on a loopback port, in front of the live stack."""
    caddy = program("caddy")
    cert, key = certificate(folder)
    port = free_port()
    site = (DEPLOY / "caddy" / "Caddyfile").read_text()
    site = site.replace("reverse_proxy 127.0.0.1:8000", f"reverse_proxy 127.0.0.1:{upstream}")
    site = site.replace(
        "countersign.example.com {", f"https://127.0.0.1:{port} {{\n\ttls {cert} {key}"
    )
    assert "flush_interval -1" in site  # the example's own directives stay
    (folder / "Caddyfile").write_text(
        "{\n\tadmin off\n\tauto_https disable_redirects\n}\n\n" + site
    )
    env = {"XDG_DATA_HOME": str(folder / "data"), "XDG_CONFIG_HOME": str(folder / "config")}
    command = [caddy, "run", "--config", str(folder / "Caddyfile"), "--adapter", "caddyfile"]
    return Proxy(command, folder, port, env)


@pytest.fixture(params=["nginx", "caddy"])
def proxy(request, live_stack, tmp_path):
    made = (nginx_proxy if request.param == "nginx" else caddy_proxy)(tmp_path, live_stack.port)
    yield made
    made.stop()


def test_a_stream_reaches_the_client_through_the_proxy_frame_by_frame(proxy, demo):
    trusted = ssl.create_default_context(cafile=str(Path(proxy.log).parent / "cert.pem"))
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {demo['token']}"}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {
            "message": {
                "messageId": str(uuid.uuid4()),
                "role": "ROLE_USER",
                "parts": [{"text": HELD}],
            }
        },
    }
    states = []
    with httpx.Client(verify=trusted, timeout=httpx.Timeout(30, read=45)) as client:
        with client.stream(
            "POST", f"{proxy.url}{demo['agents']['deployer']}", json=body, headers=headers
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            # The stream stays open through AUTH_REQUIRED: its frames so far must arrive now,
            # while nothing could have ended it (a buffering proxy would hold them until the
            # end, which only the approval below brings).
            for line in lines:
                if line.startswith("data: "):
                    result = json.loads(line[len("data: ") :])["result"]
                    update = result.get("statusUpdate") or result.get("task")
                    states.append(update["status"]["state"])
                    if states[-1] == "TASK_STATE_AUTH_REQUIRED":
                        break
            assert states[-1] == "TASK_STATE_AUTH_REQUIRED", states
            # Approved over the REST API, through the same proxy, by the operator token.
            operator = {"Authorization": f"Bearer {demo['operator_token']}"}
            page = client.get(
                f"{proxy.url}/api/v1/interactions",
                params={"state": "open", "agent": "deployer"},
                headers=operator,
            ).json()
            answered = client.post(
                f"{proxy.url}/api/v1/interactions/{page['results'][0]['id']}/answer",
                json={"approved": True, "reason": "through the proxy"},
                headers=operator,
            )
            assert answered.status_code == 200, answered.text
            for line in lines:
                if line.startswith("data: "):
                    update = json.loads(line[len("data: ") :])["result"].get("statusUpdate")
                    if update:
                        states.append(update["status"]["state"])
    # The same stream carried the rest, to the end the server gave it.
    assert states[-1] == "TASK_STATE_COMPLETED", states
