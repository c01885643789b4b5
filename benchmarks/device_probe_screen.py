"""The probe from the monitor on a real GPU (issue 14): gpumix-top attached to a running hub, under
Textual's Pilot at 120x40; `m`, "Run the probe", then wait for the results (the real `gpumix probe
--json`, its own limits: 30 s, 1 GiB per GPU). Writes the screen as SVG and text, and a JSON record:
how long the screen took, its status line, the report's per-GPU figures as the screen received them.

    python benchmarks/device_probe_screen.py --hub /run/user/0/gpumix/hub.sock --out /tmp/out
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from textual.widgets import Static

from gpumix.hub.client import HubClient
from gpumix.tui.app import GpumixApp
from gpumix.tui.probe_screen import ProbeConfirm, ProbeScreen

SIZE = (120, 40)
LIMIT_S = 150.0


def text_of(screen: Any, widget_id: str) -> str:
    return str(screen.query_one(widget_id, Static).content)


async def wait(pilot: Any, predicate: Any, what: str, limit_s: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > limit_s:
            raise TimeoutError(f"{what}: not within {limit_s} s")
        await pilot.pause(0.2)
    return time.monotonic() - start


async def drive(hub: str, out: Path) -> dict[str, Any]:
    app = GpumixApp(HubClient(hub), interval_s=1.0)
    record: dict[str, Any] = {"size": list(SIZE), "hub": hub}
    async with app.run_test(size=SIZE) as pilot:
        await wait(pilot, lambda: app.renders > 0, "the dashboard's first render", 30)
        for _ in range(5):  # a key pressed while the app still starts can be lost: press until the dialog opens
            await pilot.press("m")
            try:
                await wait(pilot, lambda: isinstance(app.screen, ProbeConfirm), "the confirmation", 10)
                break
            except TimeoutError:
                continue
        await wait(pilot, lambda: isinstance(app.screen, ProbeConfirm), "the confirmation", 1)
        record["confirmation"] = text_of(app.screen, "#probe-question")
        app.save_screenshot(str(out / "probe_screen_confirm_h200.svg"))
        await pilot.press("enter")  # the dialog: "Enter runs it, Esc cancels"
        started = time.monotonic()
        await wait(pilot, lambda: isinstance(app.screen, ProbeScreen), "the probe screen", 10)
        screen = app.screen
        await wait(pilot, lambda: screen.finished, "the probe's results", LIMIT_S)
        record["seconds_to_results"] = round(time.monotonic() - started, 2)
        record["status"] = text_of(screen, "#probe-status")
        record["results_text"] = text_of(screen, "#probe-results")
        record["report"] = screen.report
        app.save_screenshot(str(out / "probe_screen_results_h200.svg"))
        await pilot.press("escape")
        await wait(pilot, lambda: not isinstance(app.screen, ProbeScreen), "back to the dashboard", 10)
        record["back_to_dashboard"] = True
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hub", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record = asyncio.run(drive(args.hub, args.out))
    (args.out / "probe_screen_h200.json").write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "report"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
