"""`gpumix run --stair-probe` asks the job's first launch for a stair probe (issue 16): the supervisor sets
GPUMIX_STAIR_PROBE to the granularity on that launch alone, and the script's requested_probe_steps turns
it into the probe's splits. A value that is not a granule is refused in one line and training goes on.
The whole path, through a real job under the supervisor, is in tests/test_restart.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumix.agent.batch_split import split_accumulation
from gpumix.agent.probe_schedule import probe_granule, probe_steps, requested_probe_steps
from gpumix.agent.restart import RestartControl
from gpumix.cli.main import build_parser
from gpumix.run.supervisor import Supervisor
from gpumix.wire.plan_file import RESUME_STEP_ENV, STAIR_PROBE_ENV


def test_a_granule_in_the_environment_asks_for_the_probe_at_it() -> None:
    assert requested_probe_steps([16, 16, 16], {STAIR_PROBE_ENV: "4"}) == probe_steps([16, 16, 16], 4)
    assert requested_probe_steps([16, 16, 16], {STAIR_PROBE_ENV: "4"}) != probe_steps([16, 16, 16], 2)
    assert requested_probe_steps([16, 16, 16], {}) == []


def test_a_deepspeed_probe_trades_whole_multiples_of_its_accumulation_steps() -> None:
    """DeepSpeed steps at each k-th micro-batch: a granule of 3 under k = 2 trades 4, so every count stays
    m x k and runs as k micro-batches of one size."""
    steps = requested_probe_steps([16, 16], {STAIR_PROBE_ENV: "3"}, multiple_of=2)
    assert steps == probe_steps([16, 16], 4)
    assert {n for split in steps for n in split} == {8, 12, 20, 24}
    assert [probe_granule(g, k) for g, k in ((3, 2), (4, 2), (1, 3), (5, 1), (0, 4))] == [4, 4, 3, 5, 4]
    assert [len(part) for part in split_accumulation(list(range(20)), 2)] == [10, 10]
    assert [len(part) for part in split_accumulation(list(range(14)), 4)] == [4, 4, 3, 3]
    assert sum(split_accumulation(list(range(14)), 4), []) == list(range(14))  # each sample once, in order
    with pytest.raises(ValueError, match="no 4 micro-batches"):
        split_accumulation([1, 2, 3], 4)


@pytest.mark.parametrize("value", ["0", "-4", "4.0", "", "²", "٤", "99999999999999999999999", "4\x1b[31m", "70000"])
def test_a_value_that_is_not_a_granule_gets_one_line_and_no_probe(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert requested_probe_steps([16, 16], {STAIR_PROBE_ENV: value}) == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and STAIR_PROBE_ENV in err and "no stair probe" in err
    assert "\x1b" not in err  # the value as data (repr), never a raw escape


@pytest.mark.parametrize("value", ["²", "1" * 5000])
def test_a_resume_step_that_is_not_a_count_reads_as_a_fresh_start(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RESUME_STEP_ENV, value)
    assert RestartControl(0).resume_step == 0  # int("²") and a 5,000-digit int() both raise


def supervisor(tmp_path: Path, **options: object) -> Supervisor:
    return Supervisor(["true"], "t", hub=None, control_dir=tmp_path, say=lambda _: None, granularity=8, **options)


def test_the_first_launch_alone_carries_the_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STAIR_PROBE_ENV, raising=False)
    asked = supervisor(tmp_path, stair_probe=True)
    assert asked._environment()[STAIR_PROBE_ENV] == "8"  # the re-plans' granularity
    asked.restarts = 1  # a relaunch resumes: it never probes again
    assert STAIR_PROBE_ENV not in asked._environment()
    assert STAIR_PROBE_ENV not in supervisor(tmp_path)._environment()


def test_a_request_left_in_the_shell_reaches_no_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The variable is the supervisor's alone: one left in the shell would probe every relaunch."""
    monkeypatch.setenv(STAIR_PROBE_ENV, "4")
    unasked = supervisor(tmp_path)
    assert STAIR_PROBE_ENV not in unasked._environment()
    unasked.restarts = 2
    assert STAIR_PROBE_ENV not in unasked._environment()
    asked = supervisor(tmp_path, stair_probe=True)
    asked.restarts = 1
    assert STAIR_PROBE_ENV not in asked._environment()


@pytest.mark.parametrize("argv", [["run", "--stair-probe", "--", "python", "t.py"],
                                  ["run", "--granularity", "4", "--stair-probe", "--job", "j", "--", "python", "t.py"]])
def test_the_flag_is_read_wherever_it_stands_before_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.stair_probe is True and args.job_command[-2:] == ["python", "t.py"]


def test_after_the_command_it_is_the_commands() -> None:
    args = build_parser().parse_args(["run", "--", "python", "t.py", "--stair-probe"])
    assert args.stair_probe is False and args.job_command[-1] == "--stair-probe"
