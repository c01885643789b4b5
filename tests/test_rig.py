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
