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

asyncio.sslproto itself (~0.1 MB: the TLS protocol's classes) stays a stand-in until a TLS transport is asked
for; it then loads with ssl blocked, as asyncio did (a TLS connection fails as before: "stdlib ssl module not
available").
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

ASYNCIO_MODULES_THAT_IMPORT_SSL = ("asyncio.base_events", "asyncio.selector_events", "asyncio.sslproto")
SSLPROTO = "asyncio.sslproto"
_lock = threading.Lock()


class SslProtoStandIn(types.ModuleType):
    """asyncio.sslproto until a name of it is read (a TLS transport asked for): then the real module."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(f"module {SSLPROTO!r} has no attribute {name!r}")
        return getattr(real_sslproto(), name)


def real_sslproto() -> types.ModuleType:
    """The real asyncio.sslproto, loaded once in the stand-in's place with ssl blocked as asyncio was, and
    without ssl whatever loaded since (asyncio's own ssl is None: the same refusal of TLS as before)."""
    with _lock:
        current = sys.modules.get(SSLPROTO)
        if not isinstance(current, SslProtoStandIn):
            return current  # type: ignore[return-value]
        del sys.modules[SSLPROTO]
        blocked = "ssl" not in sys.modules
        if blocked:
            sys.modules["ssl"] = None  # type: ignore[assignment]
        try:
            real = importlib.import_module(SSLPROTO)
        except BaseException:
            sys.modules.setdefault(SSLPROTO, current)
            raise
        finally:
            if blocked and sys.modules.get("ssl", False) is None:
                del sys.modules["ssl"]
        real.ssl = None  # type: ignore[attr-defined]
        for name in ("asyncio", "asyncio.base_events", "asyncio.selector_events", "asyncio.proactor_events"):
            if getattr(sys.modules.get(name), "sslproto", None) is current:
                sys.modules[name].sslproto = real  # type: ignore[attr-defined]
        return real


def import_asyncio_without_ssl() -> bool:
    """Load asyncio with ssl blocked; True when asyncio now runs without ssl. Does nothing (False)
    when asyncio or ssl is already loaded, or when this Python's asyncio cannot load without ssl
    (then both load later as usual)."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return False
    sys.modules["ssl"] = None  # type: ignore[assignment]  # `import ssl` raises ImportError meanwhile
    stand_in = SslProtoStandIn(SSLPROTO)  # base_events and selector_events import it, read it for TLS only
    package = importlib.util.find_spec("asyncio")  # a top-level name: found, not imported
    if package is not None and package.submodule_search_locations is not None:  # find_spec(SSLPROTO) answers
        stand_in.__spec__ = importlib.machinery.PathFinder.find_spec(SSLPROTO, list(package.submodule_search_locations))
    sys.modules[SSLPROTO] = stand_in
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
    return all(isinstance(sys.modules[name], SslProtoStandIn) or getattr(sys.modules[name], "ssl", None) is None
               for name in ASYNCIO_MODULES_THAT_IMPORT_SSL)
