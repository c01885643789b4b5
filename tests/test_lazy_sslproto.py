"""asyncio.sslproto kept out until a TLS transport is asked for (gpumix/cli/asyncio_without_ssl.py; issue 13: the
dashboard's RSS, ~0.1 MB): asyncio loaded without ssl serves plain sockets with the stand-in in place, and a TLS
connection then loads the real module and is refused as before. In a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, os, sys, tempfile
from gpumix.cli.asyncio_without_ssl import import_asyncio_without_ssl

applied = import_asyncio_without_ssl()
import asyncio

async def echo_once(path):
    async def serve(reader, writer):
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()
    server = await asyncio.start_unix_server(serve, path)
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(b"hello")
    answer = await reader.readexactly(5)
    writer.close()
    server.close()
    return answer.decode()

echo = asyncio.run(echo_once(os.path.join(tempfile.mkdtemp(), "s")))
plain = type(sys.modules["asyncio.sslproto"]).__name__
import ssl

async def tls_through_asyncio():
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await asyncio.open_connection("127.0.0.1", port, ssl=ssl.create_default_context())
        return "connected"
    except RuntimeError as error:
        return str(error)
    finally:
        server.close()

tls = asyncio.run(tls_through_asyncio())
real = sys.modules["asyncio.sslproto"]
import asyncio.base_events, asyncio.selector_events
print(json.dumps({"applied": applied, "echo": echo, "plain": plain, "tls": tls, "after": type(real).__name__,
                  "without_ssl": real.ssl is None, "bound": asyncio.base_events.sslproto is real
                  and asyncio.selector_events.sslproto is real}))
"""


def test_plain_sockets_keep_the_stand_in_and_tls_loads_the_real_module_and_is_refused() -> None:
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd="/", timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["applied"] is True and outcome["echo"] == "hello" and outcome["plain"] == "SslProtoStandIn"
    assert "ssl module not available" in outcome["tls"]
    assert outcome["after"] == "module" and outcome["without_ssl"] is True and outcome["bound"] is True
