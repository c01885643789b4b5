"""The interactive monitor drops its interpreter's docstrings, round 3 (issue 13: the dashboard's RSS).

gpumix-top re-executes itself once with PYTHONOPTIMIZE=2 before Textual loads (gpumix/cli/docstring_free.py):
the real console script in a real pseudo-terminal, its wiring in main() (only the interactive monitor
started as the script; never a one-shot or main(argv) from Python), and the guards (the user's own
PYTHONOPTIMIZE, -OO's compiled files neither there nor writable, the opt-out).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import string
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

from gpumix.cli import docstring_free
from gpumix.cli.docstring_free import KEEP_ENV, REEXEC_ENV, forget_reexec, reexec_command

REPO = Path(__file__).resolve().parent.parent
RIG = str(REPO / "benchmarks" / "rig_1gpu.toml")
SCRIPT = Path(sys.executable).parent / "gpumix-top"  # the console script the package installs


def reexec_env(tmp_path: Path) -> dict[str, str]:
    """An environment where -OO's compiled files can be written (a private cache prefix), never a user's hub."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONOPTIMIZE", "PYTHONNODEBUGRANGES", REEXEC_ENV, KEEP_ENV)}
    return {**env, "PYTHONPYCACHEPREFIX": str(tmp_path / "pycache"), "GPUMIX_HUB": "/nonexistent/hub.sock",
            "XDG_RUNTIME_DIR": str(tmp_path), "TERM": "xterm-256color"}


def test_the_monitor_runs_at_OO_in_the_same_process_and_draws(tmp_path: Path) -> None:
    """The real script in a pseudo-terminal: the process that draws the screen is the one started (same pid,
    same command line and name) and runs with PYTHONOPTIMIZE=2 (its image's environment)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen([str(SCRIPT), "--sim", RIG, "--interval", "1"], stdin=slave, stdout=slave, stderr=slave,
                               env=reexec_env(tmp_path), start_new_session=True, close_fds=True, cwd="/")
    os.close(slave)
    output = bytearray()
    try:
        deadline = time.monotonic() + 120  # a hang guard: the first start compiles -OO's files into the prefix
        while b"4090" not in output and time.monotonic() < deadline and process.poll() is None:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    output += os.read(master, 65536)
                except OSError:
                    break
        assert b"4090" in output, (process.poll(), bytes(output[-2000:]))
        environ = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
        assert b"PYTHONOPTIMIZE=2" in environ and b"PYTHONNODEBUGRANGES=1" in environ
        assert str(SCRIPT).encode() in cmdline and b"--sim" in cmdline
        assert Path(f"/proc/{process.pid}/comm").read_text().strip() == "gpumix-top"
        os.write(master, b"q")
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)


MAIN_WITH_EXEC_RECORDED = textwrap.dedent("""
    import json, os, sys
    import gpumix.tui.main as entry
    def execve(path, args, env):  # recorded instead of done: the test reads what would have run
        print(json.dumps({"exec": path, "args": args, "optimize": env.get("PYTHONOPTIMIZE"),
                          "debug_ranges": env.get("PYTHONNODEBUGRANGES")}), flush=True)
        os._exit(0)
    os.execve = execve
    ours = ("PYTHONOPTIMIZE", "PYTHONNODEBUGRANGES", "GPUMIX_TOP_REEXEC")
    entry.run_app = lambda source, args: print(json.dumps({"app": True, "optimize": sys.flags.optimize,
                                                           "env": sorted(set(ours) & set(os.environ))}), flush=True) or 0
    sys.argv = [$script, *$args]
    sys.exit(entry.main(None if $from_script else $args))
""")


def run_main(tmp_path: Path, args: list[str], from_script: bool = True, env: dict[str, str] | None = None,
             flags: tuple[str, ...] = ()) -> str:
    code = string.Template(MAIN_WITH_EXEC_RECORDED).substitute(script=repr(str(SCRIPT)), args=repr(args),
                                                               from_script=repr(from_script))
    result = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**reexec_env(tmp_path), **(env or {})}, cwd="/")
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_only_the_interactive_monitor_started_as_the_script_reexecutes(tmp_path: Path) -> None:
    interactive = json.loads(run_main(tmp_path, ["--sim", RIG, "--interval", "1"]))
    assert interactive == {"exec": str(SCRIPT), "args": [str(SCRIPT), "--sim", RIG, "--interval", "1"], "optimize": "2",
                           "debug_ranges": "1"}
    # the one-shot keeps its start-up: no second interpreter, its JSON printed by this process
    once = json.loads(run_main(tmp_path, ["--sim", RIG, "--once", "--json"]))
    assert "exec" not in once and once["gpus"]
    # main(argv) from Python (tests, embedding) never replaces its process
    assert json.loads(run_main(tmp_path, ["--sim", RIG, "--interval", "1"], from_script=False)) == {
        "app": True, "optimize": 0, "env": []}
    # the re-executed process runs the monitor at -OO, and what it starts gets the environment it was given
    reexecuted = {"PYTHONOPTIMIZE": "2", "PYTHONNODEBUGRANGES": "1", REEXEC_ENV: "PYTHONOPTIMIZE,PYTHONNODEBUGRANGES"}
    assert json.loads(run_main(tmp_path, ["--sim", RIG, "--interval", "1"], env=reexecuted)) == {
        "app": True, "optimize": 2, "env": []}


def test_an_interpreter_that_ignores_the_environment_never_reexecutes(tmp_path: Path) -> None:
    """A script line with `python -E` (or -I): PYTHONOPTIMIZE does not take, so a re-executed process
    would start unoptimized and re-execute again, for ever (the review's reproduction: 6 starts, one pid)."""
    reexecuted = {"PYTHONOPTIMIZE": "2", "PYTHONNODEBUGRANGES": "1", REEXEC_ENV: "PYTHONOPTIMIZE,PYTHONNODEBUGRANGES"}
    again = json.loads(run_main(tmp_path, ["--sim", RIG, "--interval", "1"], env=reexecuted, flags=("-E",)))
    assert again == {"app": True, "optimize": 0, "env": []}, again  # the old code exec'd once more
    fresh = json.loads(run_main(tmp_path, ["--sim", RIG, "--interval", "1"], flags=("-E",)))
    assert fresh == {"app": True, "optimize": 0, "env": []}, fresh


@pytest.mark.parametrize(("change", "why"), [
    ({"interactive": False}, "a one-shot"),
    ({"optimize": 1}, "already optimized"),
    ({"environ": {"PYTHONOPTIMIZE": "1"}}, "the user's PYTHONOPTIMIZE stands"),
    ({"environ": {REEXEC_ENV: "1"}}, "the re-executed process itself"),
    ({"environ": {KEEP_ENV: "1"}}, "opted out"),
    ({"argv0": str(REPO / "tui" / "main.py")}, "python -m gpumix.tui.main"),
    ({"argv0": "/nonexistent/bin/gpumix-top"}, "no such script"),
    ({"files_usable": False}, "-OO's files neither there nor writable, and no cache folder of the user's own"),
    ({"files_usable": False, "cache_prefix": "/tmp/c", "environ": {"PYTHONPYCACHEPREFIX": "/p"}}, "the user's prefix"),
])
def test_the_reexec_is_skipped_where_it_does_not_pay_or_is_not_ours(change: dict, why: str) -> None:
    arguments = {"argv0": str(SCRIPT), "environ": {"HOME": "/root"}, "optimize": 0, "interactive": True,
                 "files_usable": True}
    assert reexec_command(**arguments) == (str(SCRIPT), {"HOME": "/root", "PYTHONOPTIMIZE": "2", "PYTHONNODEBUGRANGES": "1",
                                                         REEXEC_ENV: "PYTHONOPTIMIZE,PYTHONNODEBUGRANGES"})
    # -OO's files kept in a cache folder of the user's own where they cannot be beside the sources
    assert reexec_command(**{**arguments, "files_usable": False, "cache_prefix": "/home/u/.cache/gpumix/pycache"}) == (
        str(SCRIPT), {"HOME": "/root", "PYTHONOPTIMIZE": "2", "PYTHONNODEBUGRANGES": "1",
                      "PYTHONPYCACHEPREFIX": "/home/u/.cache/gpumix/pycache",
                      REEXEC_ENV: "PYTHONOPTIMIZE,PYTHONNODEBUGRANGES,PYTHONPYCACHEPREFIX"})
    # the user's own PYTHONNODEBUGRANGES is theirs: kept, and not named as added
    assert reexec_command(**{**arguments, "environ": {"PYTHONNODEBUGRANGES": "1"}})[1] == {
        "PYTHONNODEBUGRANGES": "1", "PYTHONOPTIMIZE": "2", REEXEC_ENV: "PYTHONOPTIMIZE"}
    assert reexec_command(**{**arguments, **change}) is None, why


def test_the_reexecuted_process_gives_what_it_starts_the_environment_it_was_started_with() -> None:
    environ = {"PYTHONOPTIMIZE": "2", "PYTHONNODEBUGRANGES": "1", REEXEC_ENV: "PYTHONOPTIMIZE,PYTHONNODEBUGRANGES",
               "PATH": "/bin"}
    forget_reexec(environ)
    assert environ == {"PATH": "/bin"}
    users = {"PYTHONOPTIMIZE": "2", "PYTHONNODEBUGRANGES": "1", REEXEC_ENV: "PYTHONOPTIMIZE", "PATH": "/bin"}
    forget_reexec(users)  # PYTHONNODEBUGRANGES was the user's own: kept
    assert users == {"PYTHONNODEBUGRANGES": "1", "PATH": "/bin"}
    prefixed = {"PYTHONOPTIMIZE": "2", "PYTHONPYCACHEPREFIX": "/c", REEXEC_ENV: "PYTHONOPTIMIZE,PYTHONPYCACHEPREFIX"}
    forget_reexec(prefixed)
    assert prefixed == {}
    untouched = {"PYTHONOPTIMIZE": "2", "PATH": "/bin"}  # not re-executed: the user's own, kept
    forget_reexec(untouched)
    assert untouched == {"PYTHONOPTIMIZE": "2", "PATH": "/bin"}


def files_usable_in(env: dict[str, str]) -> bool:
    code = "from gpumix.cli.docstring_free import optimized_files_usable; print(optimized_files_usable())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/", check=True)
    return result.stdout.strip() == "True"


def test_optimized_files_usable_reads_the_cache_where_this_interpreter_looks(tmp_path: Path) -> None:
    env = reexec_env(tmp_path)
    assert files_usable_in(env)  # an empty, writable prefix: written at the first -OO import
    assert not files_usable_in({**env, "PYTHONDONTWRITEBYTECODE": "1"})  # none there and none written
    compiled = subprocess.run([sys.executable, "-OO", "-c", "import asyncio"], env=env, cwd="/")  # -OO's files made
    assert compiled.returncode == 0
    assert not files_usable_in({**env, "PYTHONDONTWRITEBYTECODE": "1"})  # the standard library's only: not Textual's
    compiled = subprocess.run([sys.executable, "-OO", "-c", "import textual"], env=env, cwd="/")
    assert compiled.returncode == 0
    assert files_usable_in({**env, "PYTHONDONTWRITEBYTECODE": "1"})
    assert not docstring_free.optimized_files_usable(("asyncio", "no_such_package_here"))


def test_the_cache_folder_of_the_users_own_is_made_private_and_skipped_where_bytecode_is_never_written(tmp_path: Path) -> None:
    code = ("import json, os, sys; from gpumix.cli.docstring_free import own_cache_prefix;"
            " print(json.dumps(own_cache_prefix(os.environ)))")
    env = {**reexec_env(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    del env["PYTHONPYCACHEPREFIX"]

    def prefix(environ: dict[str, str]) -> str | None:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, cwd="/", check=True)
        return json.loads(result.stdout)

    made = prefix(env)
    assert made == str(tmp_path / "cache" / "gpumix" / "pycache")
    assert Path(made).is_dir() and Path(made).stat().st_mode & 0o777 == 0o700
    assert prefix({**env, "PYTHONDONTWRITEBYTECODE": "1"}) is None
    assert prefix({**env, "PYTHONPYCACHEPREFIX": str(tmp_path / "theirs")}) is None
    (tmp_path / "file").write_text("")
    assert prefix({**env, "XDG_CACHE_HOME": str(tmp_path / "file")}) is None  # cannot be made
