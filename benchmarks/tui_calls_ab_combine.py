"""Combine benchmarks/tui_calls_ab.sh's alternated runs into one JSON per case (issue 13):
benchmarks/results/tui_busy_<size>_<LABEL>.json (util, power, memory and PCIe moving every snapshot) and
tui_calls_synthetic-<size>_<LABEL>.json (the rig's synthetic job: util and power noise).

    .venv/bin/python benchmarks/tui_calls_ab_combine.py WORK BEFORE AFTER LABEL "COMMAND"
"""
import json
import pathlib
import statistics
import sys

work, before, after, label, command = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
out = pathlib.Path(__file__).resolve().parent / "results"
for case in ("160x48_busy", "80x24_busy", "160x48", "80x24"):
    runs = {}
    for tree in ("before", "after"):
        runs[tree] = [json.loads(p.read_text()) for p in sorted(work.glob(f"raw/{case}_{tree}_*.json"))]
    summary = {tree: {"calls_per_snapshot": [r["calls_per_snapshot"] for r in rs],
                      "median": statistics.median(r["calls_per_snapshot"] for r in rs)} for tree, rs in runs.items()}
    summary["after_over_before"] = round(summary["after"]["median"] / summary["before"]["median"], 3)
    data = {"what": "Python calls of the dashboard's UI thread per snapshot (cProfile, headless Pilot, simulated 1-GPU rig "
                    "on a manual clock; busy: util, power, memory and PCIe move every snapshot); rounds alternated "
                    "before, after", "case": case, "before_commit": before, "after_commit": after,
            "command": command, "summary": summary, "runs": runs}
    size = case.split("_")[0]
    name = f"tui_busy_{size}_{label}.json" if case.endswith("busy") else f"tui_calls_synthetic-{size}_{label}.json"
    (out / name).write_text(json.dumps(data, indent=1) + "\n")
    print(name, json.dumps(summary))
