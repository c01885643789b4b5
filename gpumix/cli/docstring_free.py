"""The interactive monitor's interpreter without docstrings: gpumix-top re-executes itself once with
PYTHONOPTIMIZE=2 (`python -OO`) and PYTHONNODEBUGRANGES=1 before it loads Textual (issue 13: RSS <=
nvitop's + 10 MB).

Docstrings are kept in memory with each function's code: Textual's, Rich's, asyncio's and ours come
to ~2.2 MB of a 41 MB dashboard (benchmarks/results/rss3_*_s8_2026-12-02.json). Nothing in the
dashboard reads a docstring, and -OO's other effect, dropping `assert`, checks nothing it relies on.
Without debug ranges, code objects keep no column table (~0.15 MB): a traceback still names each line.

The same program and pid go on (execve of the same script: `ps` shows the same command); the kernel's
peak RSS (VmHWM) starts again with the new image. Only when:
- it is the interactive monitor started as the `gpumix-top` script (not --once, not main(argv) from
  Python, not `python -m`): the one-shots keep their start-up;
- $PYTHONOPTIMIZE is not set (the user's choice stands), and this is not the re-executed process
  ($GPUMIX_TOP_REEXEC);
- `-OO`'s compiled files can be read or written beside the sources, or else in a cache folder of the
  user's own ($XDG_CACHE_HOME/gpumix/pycache, as PYTHONPYCACHEPREFIX: a system Python's standard library
  is read-only and ships without them). Without them every start would compile Textual and the standard
  library from source, ~9 MB more at the peak; the first start after an install pays that once
  (PYTHONDONTWRITEBYTECODE: no re-exec unless the files are there);
- $GPUMIX_TOP_DOCSTRINGS is not set (1: keep them, e.g. to debug).

The re-executed process drops what it added to its environment: what it starts (the probe, an editor)
runs as it would have.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, MutableMapping

REEXEC_ENV = "GPUMIX_TOP_REEXEC"  # set on the re-executed process only (the names it added): never twice
# -OO: no docstrings (~2.2 MB); no column tables in code objects (~0.15 MB; tracebacks keep their lines)
REEXEC_SETTINGS = {"PYTHONOPTIMIZE": "2", "PYTHONNODEBUGRANGES": "1"}
KEEP_ENV = "GPUMIX_TOP_DOCSTRINGS"
SCRIPT_NAME = "gpumix-top"
# The bulk of the code loaded: Textual's -OO files stand for the site-packages', asyncio's for the standard
# library's (a system Python's may be read-only and shipped without them).
PROBE_PACKAGES = ("textual", "asyncio")


def optimized_files_usable(packages: tuple[str, ...] = PROBE_PACKAGES) -> bool:
    """Whether -OO's compiled files of each of PACKAGES exist, or can be written at their first import."""
    return all(_optimized_file_usable(package) for package in packages)


def _optimized_file_usable(package: str) -> bool:
    spec = importlib.util.find_spec(package)  # finds, imports nothing
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    cached = importlib.util.cache_from_source(spec.origin, optimization=2)  # honours PYTHONPYCACHEPREFIX
    if os.path.exists(cached):
        return True
    if sys.dont_write_bytecode:
        return False
    folder = os.path.dirname(cached)
    while folder and not os.path.isdir(folder):  # __pycache__ (or the prefix's tree) is made at import
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent
    return os.access(folder, os.W_OK)


def own_cache_prefix(environ: Mapping[str, str]) -> str | None:
    """A pycache prefix of the user's own ($XDG_CACHE_HOME/gpumix/pycache) for -OO's files where they cannot
    be kept beside the sources (a system Python's read-only library): written at the first start, read after.
    None where it cannot be made, or bytecode is never written."""
    if sys.dont_write_bytecode or "PYTHONPYCACHEPREFIX" in environ:  # the user's own prefix was checked as is
        return None
    try:  # `sudo -E` keeps the user's HOME: root would make a cache there the user cannot write
        if os.stat(os.path.expanduser("~")).st_uid != os.geteuid():
            return None
    except OSError:
        return None
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    prefix = os.path.join(base, "gpumix", "pycache")
    try:
        os.makedirs(prefix, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return prefix if os.access(prefix, os.W_OK) else None


def reexec_command(argv0: str, environ: Mapping[str, str], optimize: int, interactive: bool,
                   files_usable: bool, cache_prefix: str | None = None) -> tuple[str, dict[str, str]] | None:
    """The script and environment to re-execute with, or None to go on as is. Where -OO's files are not
    usable beside the sources, CACHE_PREFIX (a folder of the user's own) keeps them, if given."""
    if not interactive or optimize or "PYTHONOPTIMIZE" in environ or REEXEC_ENV in environ or environ.get(KEEP_ENV):
        return None
    if os.path.basename(argv0) != SCRIPT_NAME or not os.path.isfile(argv0) or not os.access(argv0, os.X_OK):
        return None
    settings = dict(REEXEC_SETTINGS)
    if not files_usable:
        if cache_prefix is None or "PYTHONPYCACHEPREFIX" in environ:
            return None
        settings["PYTHONPYCACHEPREFIX"] = cache_prefix
    added = {name: value for name, value in settings.items() if name not in environ}
    return argv0, {**environ, **added, REEXEC_ENV: ",".join(added)}


def reexec_without_docstrings(interactive: bool) -> None:
    """Re-execute gpumix-top at -OO when it pays (see the module's notes); returns when it does not.
    An exec that fails leaves this process going on as before. Never where the interpreter ignores the
    environment (`python -E`/`-I` in the script's line: PYTHONOPTIMIZE would not take, and the
    re-executed process would re-execute again)."""
    if sys.flags.ignore_environment:
        return
    usable = interactive and optimized_files_usable()
    prefix = own_cache_prefix(os.environ) if interactive and not usable else None
    command = reexec_command(sys.argv[0], os.environ, sys.flags.optimize, interactive, usable, prefix)
    if command is None:
        return
    script, environ = command
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(script, [script, *sys.argv[1:]], environ)
    except OSError:
        return


def forget_reexec(environ: MutableMapping[str, str] | None = None) -> bool:
    """In the re-executed process: the settings it added are gpumix-top's own, not for what it starts.
    True when this process is the re-executed one (it must never re-execute again)."""
    environ = os.environ if environ is None else environ
    added = environ.pop(REEXEC_ENV, None)
    for name in (added or "").split(","):
        if name in (*REEXEC_SETTINGS, "PYTHONPYCACHEPREFIX"):
            environ.pop(name, None)
    return added is not None
