"""``countersign verify RECEIPT --jwks URL|FILE``: verify a receipt from a shell.

RECEIPT is a compact JWS, a file holding one (or a receipt's JSON with its ``jws``), or ``-``
for standard input. The claims are printed as JSON when the receipt holds; otherwise the
reason goes to standard error and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from .errors import ReceiptError
from .receipts import KeySet, check_receipt

COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


def read_receipt(value: str) -> tuple[str, dict[str, Any] | None]:
    """The compact JWS named by ``value``, and the receipt JSON it came in, if any."""
    if value == "-":
        text = sys.stdin.read()
    elif COMPACT_JWS.fullmatch(value):
        text = value
    else:
        try:
            text = Path(value).read_text()
        except OSError as exc:
            raise ReceiptError(f"cannot read {value}: {exc.strerror}") from None
    text = text.strip()
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            raise ReceiptError("the receipt file is neither a JWS nor JSON") from None
        token = document.get("jws") if isinstance(document, dict) else None
        if not isinstance(token, str):
            raise ReceiptError("the receipt JSON has no jws")
        return token, document
    return text, None


def read_jwks(value: str) -> KeySet:
    if value.startswith(("http://", "https://")):
        try:
            response = httpx.get(value, timeout=30, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise ReceiptError(f"cannot fetch the JWKS: {exc}") from None
        if response.status_code != 200:
            raise ReceiptError(f"the JWKS answered HTTP {response.status_code}")
        text = response.text
    else:
        try:
            text = Path(value).read_text()
        except OSError as exc:
            raise ReceiptError(f"cannot read {value}: {exc.strerror}") from None
    try:
        return KeySet(json.loads(text))
    except ValueError:
        raise ReceiptError("the JWKS is not JSON") from None


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="countersign", description=__doc__.split("\n")[0])
    commands = root.add_subparsers(dest="command", required=True)
    verify = commands.add_parser(
        "verify", help="verify a signed receipt against the server's public keys"
    )
    verify.add_argument(
        "receipt", help="a compact JWS, a file holding one or a receipt's JSON, or -"
    )
    verify.add_argument("--jwks", required=True, help="the JWKS: a URL or a file")
    verify.add_argument("--tenant", help="refuse a receipt of another tenant")
    verify.add_argument("--agent", help="refuse a receipt of another gate or agent")
    verify.add_argument("--task", help="refuse a receipt of another task")
    verify.add_argument(
        "--arguments",
        help="a JSON file of the arguments you will run: refuse them unless they hash as signed",
    )
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        token, _ = read_receipt(args.receipt)
        keys = read_jwks(args.jwks)
        asked = None
        if args.arguments:
            try:
                asked = json.loads(Path(args.arguments).read_text())
            except (OSError, ValueError) as exc:
                raise ReceiptError(f"cannot read the arguments: {exc}") from None
        receipt = check_receipt(
            token,
            keys.get,
            tenant=args.tenant,
            agent=args.agent,
            task_id=args.task,
            arguments=asked,
        )
        if asked is not None and receipt.arguments_run != asked:
            raise ReceiptError("these are not the arguments the receipt approved")
    except ReceiptError as exc:
        print(f"countersign: the receipt does not hold: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(receipt.claims, indent=2, sort_keys=True, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
