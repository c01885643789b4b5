"""Two hubs on two simulated rigs, one view: merged GPUs and ranks, routed controls, unreachable nodes."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.hub.client import HubClient
from gpumix.hub.multi import MultiHubSource
from gpumix.hub.ranks import parse_hello, parse_step
from gpumix.hub.server import HubServer
from gpumix.sim.rig import load_builtin_rig
from tests.conftest import FixedHostSampler
from tests.waiting import wait_until

TOKEN = "5a" * 32


class TwoNodes:
    def __init__(self, folder: str, clock: Any) -> None:
        self.hubs: list[Hub] = []
        self.servers: list[HubServer] = []
        for number, rig in ((1, "5070ti-x2"), (2, "4090-x2-desktop")):
            hardware = simulated_hardware(load_builtin_rig(rig), clock=clock,
                                          wall_clock=lambda: 1_764_500_000.0 + clock())
            hub = Hub(hardware, host_sampler=FixedHostSampler(), hostname=f"node{number}", clock=clock,
                      wall_clock=lambda: 1_764_500_000.0 + clock())
            self.hubs.append(hub)
        # a two-node job: ranks 0, 1 on node1 and 2, 3 on node2, each reporting to its own hub
        for node, hub in enumerate(self.hubs):
            gpus = hub.hardware.backend.gpus()
            for local in (0, 1):
                rank = 2 * node + local
                key = hub.agent_hello(parse_hello({"rank": rank, "world_size": 4, "local_rank": local, "pid": 100 + rank,
                                                   "job": "llm", "hostname": f"node{node + 1}",
                                                   "gpu_uuid": gpus[local].uuid}))
                for step in range(3):
                    hub.agent_step(key, parse_step({"step": step, "step_time_s": 0.5, "samples": 8, "loss": 2.0}))
            hub.tick()
        self.paths = [os.path.join(folder, "n1.sock"), os.path.join(folder, "n2.sock")]
        self.servers = [HubServer(self.hubs[0], self.paths[0]),  # node1: a (forwarded) Unix socket
                        HubServer(self.hubs[1], self.paths[1], tcp=("127.0.0.1", 0), token=TOKEN)]  # node2: TCP
        for server in self.servers:
            server.start()
        self.addresses = [self.paths[0], f"tcp://127.0.0.1:{self.servers[1].tcp_port}"]
        self.source = MultiHubSource([HubClient(address, timeout_s=2, token=TOKEN) for address in self.addresses],
                                     addresses=self.addresses)

    def stop(self) -> None:
        self.source.close()
        for server in self.servers:
            server.stop()


@pytest.fixture
def nodes(clock: Any) -> Iterator[TwoNodes]:
    folder = tempfile.mkdtemp(prefix="gmx", dir="/tmp")
    two = TwoNodes(folder, clock)
    yield two
    two.stop()
    shutil.rmtree(folder, ignore_errors=True)


def test_merges_gpus_ranks_and_findings(nodes: TwoNodes) -> None:
    snapshot = nodes.source.snapshot()
    assert snapshot is not None
    assert [g["node"] for g in snapshot["gpus"]] == ["node1", "node1", "node2", "node2"]
    assert [g["index"] for g in snapshot["gpus"]] == [0, 1, 2, 3]
    assert [g["node_index"] for g in snapshot["gpus"]] == [0, 1, 0, 1]
    assert len({g["uuid"] for g in snapshot["gpus"]}) == 4
    assert [g["node_label"] for g in snapshot["gpus"]] == ["n1", "n1", "n2", "n2"]  # 'node' twice: numbered
    assert "5070" in snapshot["gpus"][0]["tier"] and "4090" in snapshot["gpus"][2]["tier"]
    assert snapshot["hostname"] == "node1, node2"
    assert [n["reachable"] for n in snapshot["nodes"]] == [True, True]
    llm = [r for r in snapshot["ranks"] if r["job"] == "llm"]
    assert [(r["rank"], r["node"]) for r in llm] == [(0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")]
    assert all(r["world_size"] == 4 for r in llm)
    by_uuid = {g["uuid"]: g for g in snapshot["gpus"]}
    assert [by_uuid[r["gpu_uuid"]]["index"] for r in llm] == [0, 1, 2, 3]  # each rank on its node's GPU
    assert [g["ranks"] for g in snapshot["gpus"]] == [[0], [1], [2], [3]]
    assert snapshot["run"]["ranks"] == 4
    assert all(f["title"].startswith(("node1: ", "node2: ")) for f in snapshot["findings"])
    assert sum(t["count"] for t in snapshot["tiers"]) == 4
    # series route to the owning node, in its own numbering
    assert nodes.source.series(2, "power_w") == nodes.hubs[1].series(0, "power_w")
    # the node shows where a GPU is named: the detail panel and --once's text
    from gpumix.tui.main import text_summary
    from gpumix.tui.panels import detail_text

    assert detail_text(snapshot["gpus"][2], nodes.source.series, width=120).startswith("GPU 2 on node2 (its GPU 0) ")
    assert [line.split("]")[0] for line in text_summary(snapshot).splitlines()[1:5]] == [
        "[node1/0", "[node1/1", "[node2/0", "[node2/1"]


def caps(hub: Hub) -> list[float]:
    return [g["power_cap_w"] for g in hub.tick()["gpus"]]


def test_power_routes_to_the_owning_node(nodes: TwoNodes) -> None:
    nodes.source.snapshot()
    before = [caps(hub) for hub in nodes.hubs]
    reply = nodes.source.control({"type": "power", "action": "set", "gpus": [3], "watts": 300})
    assert reply["ok"], reply
    assert caps(nodes.hubs[0]) == before[0]
    assert caps(nodes.hubs[1]) == [before[1][0], pytest.approx(300)]
    assert [c["gpu_index"] for c in reply["changes"]] == [3]
    # across nodes: all or nothing (a cap out of range on one node changes neither)
    bad = nodes.source.control({"type": "power", "action": "set", "gpus": [0, 2], "watts": 5})
    assert bad["ok"] is False and "nothing changed" in bad["message"]
    assert caps(nodes.hubs[0]) == before[0]
    both = nodes.source.control({"type": "power", "action": "reset", "gpus": [0, 3]})
    assert both["ok"], both
    assert {c["node"] for c in both["changes"]} == {"node1", "node2"}
    assert nodes.source.control({"type": "power", "action": "set", "gpus": [9], "watts": 200})["ok"] is False
    one_budget = nodes.source.control({"type": "power", "action": "fit", "budget_w": 900, "dry_run": True})
    assert one_budget["ok"] is False and "name the node" in one_budget["message"]


def test_fit_fits_each_node_to_its_own_budget(nodes: TwoNodes) -> None:
    # Each machine has its own PSU (650 W and 850 W here): one fit proposes caps for both, as the TUI's `b`.
    nodes.source.snapshot()
    proposal = nodes.source.control({"type": "power", "action": "fit", "dry_run": True})
    assert proposal["ok"], proposal
    assert [(g["index"], g["node"]) for g in proposal["fit"]["gpus"]] == [
        (0, "node1"), (1, "node1"), (2, "node2"), (3, "node2")]
    assert proposal["fit"]["budget_w"] == 650 + 850 and "node1: " in proposal["message"]
    caps = {str(g["index"]): g["new_w"] for g in proposal["fit"]["gpus"]}
    assert nodes.source.control({"type": "power", "action": "caps", "caps": caps})["ok"]
    for hub, budget in zip(nodes.hubs, (650, 850), strict=True):
        assert sum(c for c in [g["power_cap_w"] for g in hub.tick()["gpus"]]) <= budget + 1e-6
    assert nodes.source.control({"type": "power", "action": "fit", "node": "node9"})["ok"] is False


def test_replan_routes_to_the_supervisors_node(nodes: TwoNodes) -> None:
    nodes.hubs[1].supervisor_poll("llm", {"state": "running"})
    nodes.hubs[1].tick()
    snapshot = nodes.source.snapshot()
    assert snapshot["jobs"]["llm"]["node"] == "node2"
    reply = nodes.source.control({"type": "replan", "job": "llm", "plan": {"bogus": True}})
    assert reply["type"] == "replan_result" and "not a usable plan" in reply["message"]  # node2's hub answered
    missing = nodes.source.control({"type": "replan", "job": "other", "plan": {}})
    assert missing["ok"] is False and "no attached node" in missing["message"]


def test_unreachable_node_and_its_return(nodes: TwoNodes) -> None:
    assert nodes.source.snapshot() is not None
    nodes.servers[1].stop()
    snapshot = nodes.source.snapshot()
    lost = [g["lost"] for g in snapshot["gpus"]]
    assert lost == [False, False, True, True]
    assert any(f["title"] == "node node2 unreachable" and f["severity"] == "error" for f in snapshot["findings"])
    assert not any(r["connected"] for r in snapshot["ranks"] if r["node"] == "node2")
    assert "node2 ✖" in snapshot["hostname"]
    assert nodes.source.control({"type": "power", "action": "set", "gpus": [2], "watts": 300})["ok"] is False
    # the node's hub comes back on the same address
    server = HubServer(nodes.hubs[1], nodes.paths[1] + "b", tcp=("127.0.0.1", nodes.servers[1].tcp_port), token=TOKEN)
    server.start()
    nodes.servers[1] = server
    snapshot = wait_until(lambda: (s := nodes.source.snapshot()) and not any(g["lost"] for g in s["gpus"]) and s,
                          10, "the node back")
    assert [g["lost"] for g in snapshot["gpus"]] == [False] * 4
    assert not any("unreachable" in f["title"] for f in snapshot["findings"])


def test_a_node_never_reached_is_listed(nodes: TwoNodes) -> None:
    source = MultiHubSource([HubClient(nodes.addresses[0], timeout_s=1), HubClient("/nonexistent/hub.sock", timeout_s=1)])
    snapshot = source.snapshot()
    source.close()
    assert len(snapshot["gpus"]) == 2
    assert any(f["title"] == "node /nonexistent/hub.sock unreachable" for f in snapshot["findings"])


async def test_tui_shows_both_nodes(nodes: TwoNodes) -> None:
    from gpumix.tui.app import GpumixApp
    from gpumix.tui.gpu_table import GpuTable
    from tests.screen import screen_text, started

    app = GpumixApp(nodes.source, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app, tries=100)
        await pilot.pause()
        text = screen_text(app)
        assert app.query_one(GpuTable).row_count == 4
        assert "node1, node2" in text
        lines = text.splitlines()
        assert any(":5070" in line for line in lines) and any(":4090" in line for line in lines)
        assert all(len(line) <= 80 for line in lines)
