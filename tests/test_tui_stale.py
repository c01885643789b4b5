"""An attached monitor whose hub dies says so: after two intervals without a snapshot the title
reads "hub lost — reconnecting (N s)" with the client's reason and the values dim; when a hub
answers again the picture comes back by itself (issue 12, item 3). The hub is a real process
(tests/hub_helper.py) on a real socket, killed with SIGKILL and started again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import Static

from gpumix.hub.client import HubClient
from gpumix.tui.app import GpumixApp

pytestmark = pytest.mark.usefixtures("tui_env")

ROOT = Path(__file__).resolve().parent.parent
HUB_HELPER = ROOT / "tests" / "hub_helper.py"


def start_hub(path: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(HUB_HELPER), path], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def hub_path() -> Iterator[str]:
    path = f"/tmp/gpumix-stale-{os.getpid()}.sock"
    yield path
    if os.path.exists(path):
        os.unlink(path)


async def until(predicate, deadline_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not predicate():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.05)


@pytest.mark.timeout(180)
async def test_a_killed_hub_is_said_dimmed_and_recovered(hub_path: str) -> None:
    procs = [start_hub(hub_path)]
    try:
        app = GpumixApp(HubClient(hub_path, timeout_s=1.0), interval_s=0.2)
        async with app.run_test(size=(80, 24)) as pilot:
            title = app.query_one("#title", Static)
            await until(lambda: app.renders > 0)
            assert "hub lost" not in str(title.render())
            table = app.query_one("#gpus")
            assert table.styles.text_opacity == 1.0

            procs[0].send_signal(signal.SIGKILL)
            procs[0].wait()
            await until(lambda: "hub lost — reconnecting (" in str(title.render()))
            text = str(title.render())
            assert " s)" in text and hub_path in text, text  # how long, and the client's reason
            assert table.styles.text_opacity < 1.0  # the last values stay, dimmed
            await until(lambda: str(title.render()) != text)  # the count goes on

            procs.append(start_hub(hub_path))  # a new hub on the same socket
            renders = app.renders
            await until(lambda: app.renders > renders and "hub lost" not in str(title.render()))
            assert table.styles.text_opacity == 1.0
            assert any("hub back after" in str(n.message) for n in app._notifications)
            await pilot.pause()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=10)
