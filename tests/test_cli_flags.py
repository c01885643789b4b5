"""Every documented option, in every position, for every command: honoured where it stands or refused
with one line, never dropped (a `--dry-run` before `set` once changed caps)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpumix.cli import main as cli
from gpumix.power.caps import audit_log_path
from gpumix.tui import main as top

TOOL = [sys.executable, "-m", "gpumix.cli.main"]
TOP = [sys.executable, "-m", "gpumix.tui.main"]
RIG = str(Path(__file__).parents[1] / "gpumix" / "rigs" / "mixed10.toml")

# What a leaf command needs besides the option under test (positionals, a required choice).
REQUIRED = {
    ("power", "set"): ["0", "100"],
    ("power", "reset"): ["0"],
    ("power", "profile"): ["rtx3090"],
    ("export",): ["rec.db", "--csv", "out"],
}
SKIP_DESTS = {"help", "version"}


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=90, env=dict(os.environ))


def one_line_error(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def audit_lines() -> list[dict]:
    path = audit_log_path()
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- the reported bug, as a user typed it ------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["power", "--dry-run", "set", "--sim", RIG, "3", "100", "--json"],
    ["power", "--dry-run", "--sim", RIG, "set", "3", "100", "--json"],
    ["power", "--json", "set", "3", "100", "--dry-run", "--sim", RIG],
])
def test_dry_run_before_or_after_the_action_changes_nothing(argv: list[str]) -> None:
    result = run([*TOOL, *argv])
    assert result.returncode == 0, result.stderr
    change = json.loads(result.stdout)
    assert change["dry_run"] is True and change["cap_now_w"] is None and change["new_w"] == 100
    assert audit_lines() == []  # a change writes one audit line; a dry run none


def test_dry_run_fit_before_the_action_applies_nothing() -> None:
    result = run([*TOOL, "power", "--dry-run", "--sim", RIG, "fit", "--budget", "2000", "--json"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["applied"] is False
    assert audit_lines() == []


def test_rig_flag_before_the_action_is_not_dropped_for_real_nvml() -> None:
    result = run([*TOOL, "power", "--sim", RIG, "show"])  # once went to real NVML: "no NVIDIA driver"
    assert result.returncode == 0, result.stderr
    assert "RTX 4090 24G" in result.stdout


def test_rig_flags_on_both_sides_conflict() -> None:
    line = one_line_error(run([*TOOL, "power", "--demo", "show", "--sim", RIG]))
    assert "--sim" in line and "--demo" in line


def test_shipped_rig_by_name() -> None:
    result = run([*TOP, "--sim", "5070ti-x2", "--once"])  # `gpumix rigs` lists it; --sim once refused it
    assert result.returncode == 0, result.stderr
    assert "RTX 5070 Ti 16G" in result.stdout


# -- the walk: every option of every command, before and after its subcommand ----------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
            ) -> list[tuple[tuple[str, ...], list[argparse.ArgumentParser]]]:
    """(command path, the parsers along it) for every leaf command."""
    children = _subparsers(parser)
    if not children:
        return [(path, [parser])]
    return [(leaf, [parser, *chain]) for name, child in children.items() for leaf, chain in _leaves(child, (*path, name))]


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.dest not in SKIP_DESTS]


SAMPLE_WORDS = ("3", "1,2", "2M", "127.0.0.1:9400")


def _sample(action: argparse.Action) -> tuple[list[str], object]:
    """The words that give this option a value, and the value the namespace must then hold."""
    flag = action.option_strings[-1]
    if action.nargs == 0:
        return [flag], action.const
    if action.choices:
        choice = sorted(action.choices)[0]
        return [flag, choice], choice
    convert = action.type or str
    for word in SAMPLE_WORDS:
        try:
            value = convert(word)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        return [flag, word], [value] if isinstance(action, argparse._AppendAction) else value
    raise AssertionError(f"no sample value for {flag}")


def _parse(parser: argparse.ArgumentParser, argv: list[str], capsys: pytest.CaptureFixture[str]
           ) -> argparse.Namespace | str:
    """The namespace, or the one error line argparse or our checks gave."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_:
        assert exit_.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]


def _run_base(path: tuple[str, ...]) -> list[str]:
    return list(REQUIRED.get(path, []))


TOOL_LEAVES = _leaves(cli.build_parser())


@pytest.mark.parametrize(("path", "chain"), TOOL_LEAVES, ids=[" ".join(p) for p, _ in TOOL_LEAVES])
def test_every_gpumix_option_in_every_position(path: tuple[str, ...], chain: list[argparse.ArgumentParser],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    leaf = chain[-1]
    base = _run_base(path)
    tail = ["--", "python", "train.py"] if path == ("run",) else []
    for action in _options(leaf):
        if path == ("export",) and action.dest in ("csv", "parquet"):
            continue  # the required choice itself: covered by the base arguments
        words, expected = _sample(action)
        # after the last subcommand: always honoured
        args = _parse(cli.build_parser(), [*path, *base, *words, *tail], capsys)
        assert isinstance(args, argparse.Namespace), f"{path} {words}: {args}"
        assert getattr(args, action.dest) == expected, (path, words)
        # before a subcommand: honoured (the command has it too) or refused naming the option
        for depth in range(len(path)):
            argv = [*path[:depth], *words, *path[depth:], *base, *tail]
            if depth == 0:  # `gpumix --flag command`: main() refuses, naming the flag and where it goes
                with pytest.raises(SystemExit) as exit_:
                    cli.refuse_options_before_command(argv, set(cli.command_parsers(cli.build_parser())))
                assert exit_.value.code == 2
                line = capsys.readouterr().err.strip()
                assert words[0] in line and f"gpumix {path[0]} {words[0]}" in line, line
                continue
            parent = chain[depth]
            args = _parse(cli.build_parser(), argv, capsys)
            if any(words[0] in a.option_strings for a in _options(parent)):
                assert isinstance(args, argparse.Namespace), f"{argv}: {args}"
                assert getattr(args, action.dest) == expected, argv
            else:
                assert isinstance(args, str) and words[0] in args, (argv, args)


def test_power_budget_before_an_action_that_takes_none_is_refused() -> None:
    line = one_line_error(run([*TOOL, "power", "--budget", "2000", "show", "--sim", RIG]))
    assert "--budget" in line and "fit" in line


TOP_OPTIONS = _options(top.build_parser())


@pytest.mark.parametrize("action", TOP_OPTIONS, ids=[a.option_strings[-1] for a in TOP_OPTIONS])
def test_every_gpumix_top_option_first_or_last(action: argparse.Action, capsys: pytest.CaptureFixture[str]) -> None:
    words, expected = _sample(action)
    other = ["--readonly"] if action.dest != "readonly" else ["--once"]
    for argv in ([*words, *other], [*other, *words]):
        args = _parse(top.build_parser(), argv, capsys)
        assert isinstance(args, argparse.Namespace), args
        assert getattr(args, action.dest) == expected, argv


# -- flags that cannot apply in the mode chosen: refused, one line ---------------------------------------


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--hub", "/nonexistent.sock", "--power-budget", "2000"], "--power-budget"),
    (["--hub", "/nonexistent.sock", "--history-minutes", "5"], "--history-minutes"),
    (["--replay", "rec.db", "--power-budget", "2000"], "--power-budget"),
    (["--demo", "--record-max-size", "1M"], "--record-max-size needs --record"),
    (["--demo", "--token-file", "t"], "--token-file"),
    (["--history-minutes", "inf"], "finite"),
    (["--interval", "nan"], "finite"),
    (["--interval", "1e9"], "at most"),
    (["--power-budget", "1e400"], "finite"),
])
def test_top_flags_that_cannot_apply_are_refused(argv: list[str], fragment: str) -> None:
    assert fragment in one_line_error(run([*TOP, *argv]))


@pytest.mark.parametrize(("argv", "fragment"), [
    (["power", "fit", "--sim", RIG, "--budget", "0"], "must be positive"),
    (["power", "fit", "--sim", RIG, "--budget", "nan"], "finite"),
    (["power", "fit", "--sim", RIG, "--budget", "inf"], "finite"),
    (["power", "set", "--sim", RIG, "-1", "100"], "argument gpu"),
    (["hub", "--demo", "--interval", "inf"], "finite"),
    (["hub", "--demo", "--history-minutes", "inf"], "finite"),
    (["hub", "--demo", "--record-max-size", "1M"], "--record-max-size needs --record"),
    (["plan", "--demo", "--global-batch", "0"], "at least 1"),
    (["plan", "--demo", "--global-batch", str(10**30)], "at most"),
    (["plan", "--demo", "--gradient-mb", "inf"], "finite"),
    (["plan", "--demo", "--granularity", "1000000"], "at most"),
    (["plan", "--demo", "--out", "/tmp/x"], "--deepspeed-config"),
    (["run", "--granularity", "0", "--", "true"], "at least 1"),
    (["--json", "doctor"], "goes after the command: gpumix doctor --json"),
])
def test_tool_numbers_and_misplaced_flags_are_refused(argv: list[str], fragment: str) -> None:
    assert fragment in one_line_error(run([*TOOL, *argv]))


def test_deepspeed_config_that_is_not_an_object_or_cannot_be_written(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    base.write_text("[1, 2]")
    line = one_line_error(run([*TOOL, "plan", "--demo", "--deepspeed-config", str(base)]))
    assert "JSON object" in line
    base.write_text("{}")
    line = one_line_error(run([*TOOL, "plan", "--demo", "--deepspeed-config", str(base), "--out", "/dev/null/x"]))
    assert "cannot write the DeepSpeed configs" in line


def _start_hub(args: list[str], folder: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(folder), "XDG_RUNTIME_DIR": str(folder)}
    hub = subprocess.Popen([*TOOL, "hub", "--sim", "mixed-10", *args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env)
    return hub, hub.stdout.readline()


def test_hub_banner_names_the_scheme_a_tls_client_needs(tmp_path: Path) -> None:
    from tests.test_remote_tls import make_certificate

    cert, key = make_certificate(tmp_path, "hub")
    hub, banner = _start_hub(["--socket", str(tmp_path / "h.sock"), "--tcp", "127.0.0.1:0",
                              "--tls-cert", str(cert), "--tls-key", str(key)], tmp_path)
    try:
        assert "tls://127.0.0.1:" in banner and "tcp://" not in banner, banner
    finally:
        hub.terminate()
        hub.wait(30)


def test_hub_allow_group_opens_the_socket_to_that_group(tmp_path: Path) -> None:
    import shutil
    import stat
    import tempfile

    reachable = Path(tempfile.mkdtemp(prefix="gpumix-allow-", dir="/tmp"))  # pytest's tmp_path is 0700 above
    reachable.chmod(0o755)
    socket_path = reachable / "run" / "hub.sock"
    hub, banner = _start_hub(["--socket", str(socket_path), "--allow-group", str(os.getgid())], tmp_path)
    try:
        assert "listening on" in banner, hub.stderr.read() if hub.poll() is not None else banner
        mode = os.stat(socket_path)
        assert stat.S_IMODE(mode.st_mode) == 0o660 and mode.st_gid == os.getgid()
    finally:
        hub.terminate()
        hub.wait(30)
        shutil.rmtree(reachable, ignore_errors=True)
    line = one_line_error(run([*TOOL, "hub", "--sim", "mixed-10", "--allow-group", "0"]))
    assert "--socket" in line


def test_hub_retention_flag_reaches_the_hub(tmp_path: Path) -> None:
    import socket

    from gpumix.hub.client import HubClient
    from gpumix.wire import protocol
    from tests.conftest import wait_until

    socket_path = str(tmp_path / "h.sock")
    hub, banner = _start_hub(["--socket", socket_path, "--interval", "0.2", "--retention-minutes", "0.02"], tmp_path)
    client = HubClient(socket_path)
    try:
        assert "listening on" in banner, banner
        with socket.socket(socket.AF_UNIX) as agent:
            agent.connect(socket_path)
            agent.sendall(protocol.encode({"type": "hello", "role": "agent", "rank": 0, "pid": 4242, "job": "short"}))
            agent.sendall(protocol.encode({"type": "step", "step": 1, "step_time_s": 0.1, "samples": 8}))
            assert wait_until(lambda: [r for r in (client.snapshot() or {}).get("ranks", []) if r["job"] == "short"], 10)
            agent.sendall(protocol.encode({"type": "bye"}))
        # gone, then forgotten after 1.2 s (the default keeps it 10 minutes)
        assert wait_until(lambda: not [r for r in (client.snapshot() or {"ranks": [1]})["ranks"]
                                       if r["job"] == "short"], 15)
    finally:
        client.close()
        hub.terminate()
        hub.wait(30)


def test_run_kill_grace_reaches_the_supervisor(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpumix.run.supervisor

    given: dict[str, object] = {}

    class Recording:
        def __init__(self, *args: object, **kwargs: object) -> None:
            given.update(kwargs)

        def run(self) -> int:
            return 0

        def stop(self) -> None:
            pass

    monkeypatch.setattr(gpumix.run.supervisor, "Supervisor", Recording)
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # keep pytest's own Ctrl+C handler
    assert cli.main(["run", "--kill-grace", "2.5", "--", "true"]) == 0
    assert given["kill_grace_s"] == 2.5


def test_demo_scenario_shows_its_finding() -> None:
    result = run([*TOP, "--demo", "--scenario", "cpu-forwarding", "--once", "--json"])
    assert result.returncode == 0, result.stderr
    assert "cpu-forwarding" in {finding["id"] for finding in json.loads(result.stdout)["findings"]}
    line = one_line_error(run([*TOOL, "hub", "--scenario", "cpu-forwarding"]))
    assert "--demo or --sim" in line


def test_power_config_reaches_the_hub_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    layout = tmp_path / "power.toml"
    layout.write_text("""[power]
headroom = 0.1
[[power.circuits]]
name = "wall"
volts = 230
amps = 10
[[power.supplies]]
name = "psu"
rating_w = 1000
circuit = "wall"
board = true
gpus = [0, 1]
""")
    result = run([*TOP, "--sim", "5070ti-x2", "--power-config", str(layout), "--once", "--json"])
    assert result.returncode == 0, result.stderr
    assert [supply["name"] for supply in json.loads(result.stdout)["power_layout"]["supplies"]] == ["psu"]
    layout.write_text("[power]\nheadroom = -3\n")
    assert str(layout) in one_line_error(run([*TOP, "--sim", "5070ti-x2", "--power-config", str(layout), "--once"]))
