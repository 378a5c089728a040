"""The live server the tests use: sdk/test.sh starts one and sets these."""

import os

SOCKET = os.environ.get("AIRLOCK_SOCKET")
URL = os.environ.get("AIRLOCK_URL")
TOKEN = os.environ.get("AIRLOCK_TOKEN")


def require() -> None:
    if not (SOCKET and URL and TOKEN):
        raise RuntimeError("these tests need a live server: set AIRLOCK_SOCKET, AIRLOCK_URL and AIRLOCK_TOKEN, or run sdk/test.sh")
