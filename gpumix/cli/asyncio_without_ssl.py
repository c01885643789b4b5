"""asyncio loaded without `ssl`, for a process whose event loops never speak TLS (issue 13: RSS).

asyncio's base_events, selector_events and sslproto import ssl as they load, whether or not a TLS
connection is ever made: the ssl module with libssl and libcrypto is ~5 MB of the dashboard's ~48 MB.
Each of them guards that import (`try: import ssl / except ImportError: ssl = None`), so asyncio
loaded while ssl is blocked works as before, only without TLS on its own transports: a TLS
connection or server through that asyncio fails loudly ("stdlib ssl module not available"),
never in clear text.

The block lasts only while asyncio loads: a later `import ssl` gets the real module, so the
blocking client's tls:// connections (`auth.open_socket`) work as before. For gpumix-top only,
whose loops never speak TLS (Textual's; its in-process hub listens on its Unix socket alone and takes
no --tcp or --tls-cert); never for `gpumix hub`, whose TCP listener serves TLS through asyncio.
"""

from __future__ import annotations

import sys

ASYNCIO_MODULES_THAT_IMPORT_SSL = ("asyncio.base_events", "asyncio.selector_events", "asyncio.sslproto")


def import_asyncio_without_ssl() -> bool:
    """Load asyncio with ssl blocked; True when asyncio now runs without ssl. Does nothing (False)
    when asyncio or ssl is already loaded, or when this Python's asyncio cannot load without ssl
    (then both load later as usual)."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return False
    sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` raises ImportError meanwhile
    try:
        import asyncio  # noqa: F401  (loads base_events, selector_events via unix_events, and sslproto)

        for name in ASYNCIO_MODULES_THAT_IMPORT_SSL:
            __import__(name)
    except ImportError:  # an asyncio whose import of ssl is not guarded: forget the half-loaded package
        for name in [name for name in sys.modules if name == "asyncio" or name.startswith("asyncio.")]:
            del sys.modules[name]
        return False
    finally:
        if "ssl" in sys.modules and sys.modules["ssl"] is None:
            del sys.modules["ssl"]
    return all(getattr(sys.modules[name], "ssl", None) is None for name in ASYNCIO_MODULES_THAT_IMPORT_SSL)
