"""Rig files: the shipped rigs load; a bad file gets one line naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumix.sim.rig import BUILTIN_RIGS, RigError, load_builtin_rig, load_rig, parse_rig

GOOD = """\
name = "t"
seed = 3

[[gpus]]
model = "rtx3090"
slot_width = 16

[[gpus]]
model = "rtx3060"
slot_width = 4
behind_chipset = true
"""


def test_shipped_rigs_load() -> None:
    for name in BUILTIN_RIGS:
        rig = load_builtin_rig(name)
        assert rig.name == name and rig.gpus


def test_demo_rig_is_the_mixed_box() -> None:
    rig = load_builtin_rig("mixed-10")
    names = [gpu.model.name for gpu in rig.gpus]
    assert names.count("NVIDIA GeForce RTX 3060") == 3
    assert names.count("NVIDIA GeForce RTX 3090") == 4
    assert names.count("NVIDIA GeForce RTX 4090") == 3
    assert {gpu.link_width_max for gpu in rig.gpus} == {1, 4, 8, 16}
    assert all(gpu.link_gen_max == 4 for gpu in rig.gpus)
    assert {gpu.model.mem_gib for gpu in rig.gpus} == {12, 24}
    # Each card has its own settable range, read as NVML would.
    oc = [gpu for gpu in rig.gpus if gpu.model.key == "rtx3090-oc"]
    assert oc and oc[0].model.tdp_w == 390 and oc[0].model.power_limit_max_w == 480
    assert len({gpu.uuid for gpu in rig.gpus}) == 10


def test_small_rigs() -> None:
    ti = load_builtin_rig("5070ti-x2")
    assert [g.link_gen_max for g in ti.gpus] == [5, 4] and [g.link_width_max for g in ti.gpus] == [16, 4]
    desk = load_builtin_rig("4090-x2-desktop")
    assert [g.link_width_max for g in desk.gpus] == [8, 8]


def test_good_rig_parses() -> None:
    rig = parse_rig(GOOD, "t.toml")
    assert [gpu.slot_width for gpu in rig.gpus] == [16, 4]
    assert rig.gpus[1].behind_chipset


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace('model = "rtx3060"', 'model = "rtx3070"'), "t.toml:9: gpus[1].model: unknown model 'rtx3070'"),
        (GOOD.replace("slot_width = 4", "slot_width = 3"), "t.toml:10: gpus[1].slot_width: must be one of"),
        (GOOD.replace("slot_width = 4", 'slot_width = "x4"'), "t.toml:10: gpus[1].slot_width: expected a number"),
        (GOOD.replace("slot_width = 16", "slot_width = true"), "t.toml:6: gpus[0].slot_width: expected a number"),
        (GOOD.replace("behind_chipset = true", "behind_chipset = true\ncolour = 1"), "t.toml:12: gpus[1].colour: unknown field"),
        (GOOD.replace('name = "t"\n', ""), "t.toml:1: missing field 'name'"),
        (GOOD.replace("slot_width = 4\n", ""), "t.toml:8: gpus[1]: missing field 'slot_width'"),
        (GOOD.replace("seed = 3", "seed = = 3"), "t.toml:2: invalid TOML"),
        ('name = "t"\ngpus = []\n', "t.toml:2: gpus: a rig needs at least one"),
        (
            GOOD + '\n[models.mine]\nname = "X"\nmem_gib = 8\ntdp_w = 500\npower_limit_min_w = 100\n'
            'power_limit_max_w = 400\npcie_gen = 4\npcie_width = 16\nrelative_speed = 1\n',
            "t.toml:16: models.mine: need 0 < power_limit_min_w <= tdp_w <= power_limit_max_w",
        ),
    ],
)
def test_bad_rig_names_file_line_field(text: str, expected: str) -> None:
    with pytest.raises(RigError) as error:
        parse_rig(text, "t.toml")
    message = str(error.value)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_host_memory_bandwidth_is_read_from_the_rig() -> None:
    assert parse_rig(GOOD.replace("seed = 3", "seed = 3\nhost_memory_gb_s = 20.5"), "t.toml").host_memory_bytes_per_s == 20.5e9
    assert parse_rig(GOOD, "t.toml").host_memory_bytes_per_s is None  # the world's default (docs/rigs.md)


def test_rig_may_define_its_own_models(tmp_path: Path) -> None:
    path = tmp_path / "own.toml"
    path.write_text(
        GOOD.replace('model = "rtx3060"', 'model = "a6000"')
        + '\n[models.a6000]\nname = "NVIDIA RTX A6000"\nmem_gib = 48\ntdp_w = 300\npower_limit_min_w = 100\n'
        'power_limit_max_w = 300\npcie_gen = 4\npcie_width = 16\nrelative_speed = 1.1\n'
    )
    rig = load_rig(path)
    assert rig.gpus[1].model.mem_gib == 48


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(RigError, match=r"nope.toml: cannot read rig file"):
        load_rig(tmp_path / "nope.toml")


# -- every field type-, finiteness- and range-checked (issue 10, item 11) -------------------------

MINE = ('\n[models.mine]\nname = "X"\nmem_gib = 8\ntdp_w = 300\npower_limit_min_w = 100\npower_limit_max_w = 400\n'
        'pcie_gen = 4\npcie_width = 16\nrelative_speed = 1\n')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + MINE.replace("mem_gib = 8", "mem_gib = inf"), "t.toml:15: models.mine.mem_gib: must be 0.125 to 4096, got inf"),
        (GOOD + MINE.replace("mem_gib = 8", "mem_gib = nan"), "t.toml:15: models.mine.mem_gib: must be 0.125 to 4096, got nan"),
        (GOOD + MINE + "idle_power_w = -5\n", "t.toml:22: models.mine.idle_power_w: must be 0 to 5000, got -5"),
        (GOOD + MINE + "idle_power_w = 450\n", "t.toml:22: models.mine.idle_power_w: must be at most power_limit_max_w"),
        (GOOD + MINE.replace("relative_speed = 1", "relative_speed = 1e400"), "t.toml:21: models.mine.relative_speed: must be"),
        (GOOD + MINE + "sm_clock_max_mhz = 0\n", "t.toml:22: models.mine.sm_clock_max_mhz: must be 1 to 10000, got 0"),
        (GOOD + MINE.replace('name = "X"', 'name = "\\u001b]0;PWNED\\u0007"'),
         "t.toml:14: models.mine.name: must not hold control characters, got '\\x1b]0;PWNED\\x07'"),
        (GOOD + MINE + 'unsupported_calls = ["nvml; rm -rf /"]\n', "t.toml:22: models.mine.unsupported_calls: expected NVML"),
        ('name = "t"\ngpus = [1, 2]\n', "t.toml:2: gpus[0]: expected a [[gpus]] table, got 1"),
        (GOOD.replace("seed = 3", "seed = -1"), "t.toml:2: seed: must be 0 to 4294967295, got -1"),
        (GOOD.replace("seed = 3", "seed = 3\npower_budget_w = nan"), "t.toml:3: power_budget_w: must be 1 to 1000000, got nan"),
        (GOOD.replace("seed = 3", "seed = 3\nhost_memory_gb_s = 0"), "t.toml:3: host_memory_gb_s: must be 1 to 10000, got 0"),
        (GOOD.replace("seed = 3", "seed = 3\nhost_memory_gb_s = inf"), "t.toml:3: host_memory_gb_s: must be 1 to 10000"),
        (GOOD.replace('name = "t"', f'name = "{"x" * 200}"'), "t.toml:1: name: must hold 1 to 128 characters, got 200"),
        ('name = "t"\n' + '[[gpus]]\nmodel = "rtx3090"\nslot_width = 16\n' * 65, "t.toml:2: gpus: must hold 0 to 64 entries"),
        ("a = " + "[" * 5000 + "]" * 5000, "t.toml:1: invalid TOML: nested too deeply"),
    ],
)
def test_out_of_range_fields_name_file_line_field(text: str, expected: str) -> None:
    with pytest.raises(RigError) as error:
        parse_rig(text, "t.toml")
    message = str(error.value)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_a_file_that_is_not_utf8_or_too_large_is_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b'name = "t"\nseed = "\xff"\n')
    with pytest.raises(RigError, match=r"binary.toml:2: not UTF-8 text \(byte 19\)$"):
        load_rig(binary)
    huge = tmp_path / "huge.toml"
    huge.write_bytes(b"#" * (2 * 1024**2))
    with pytest.raises(RigError, match=r"huge.toml: not a rig file: larger than 1024 KiB$"):
        load_rig(huge)


@pytest.mark.parametrize("content", [
    b'name = "t"\n[[gpus]]\nmodel = "mine"\nslot_width = 16\n' + MINE.replace("mem_gib = 8", "mem_gib = inf").encode(),
    b'name = "t"\ngpus = [1, 2]\n', b"\xff\xfe"])
def test_gpumix_topo_with_a_bad_rig_is_one_line_and_exit_2(tmp_path: Path, content: bytes) -> None:
    import subprocess
    import sys

    rig = tmp_path / "bad.toml"
    rig.write_bytes(content)
    done = subprocess.run([sys.executable, "-m", "gpumix.cli.main", "topo", "--sim", str(rig)],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "accelerator" not in line]  # deepspeed's import note
    assert len(lines) == 1 and lines[0].startswith(f"gpumix: {rig}"), done.stderr
