"""One real GPU read as 1 and as N in the hub (hub_gpu_reading_cost.py --alias-gpus), summarized: each run's
median and mean reading a tick, and what each GPU past the first adds, from the medians (ticks without the
quiet GPUs' slow reads) and from the means (with them, as the window caught them). Reads only the files named.

    python benchmarks/alias_reading_summary.py benchmarks/results/hub_gpu_reading_alias*_h100_s19_2026-12-07.json \\
        --out benchmarks/results/hub_gpu_reading_alias_summary_h100_s19_2026-12-07.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--out")
    args = parser.parse_args()
    runs: dict[str, dict[str, dict[str, float]]] = {}  # load (idle, busy) -> run label -> figures
    for name in args.files:
        data = json.loads(Path(name).read_text())
        match = re.search(r"alias(\d+)_(idle|busy)_(\d+)", Path(name).name)
        if not match or not data.get("aliased"):
            sys.exit(f"{name}: not an aliased reading (hub_gpu_reading_cost.py --alias-gpus N)")
        readings = data["readings_cpu_ms"]
        runs.setdefault(match[2], {})[f"gpus_{match[1]}_run_{match[3]}"] = {
            "gpus": data["gpus"], "reading_ms_median": statistics.median(readings),
            "reading_ms_mean": statistics.fmean(readings), "rest_ms_mean": data["rest_cpu_ms"]}
    summary = {}
    for load, found in runs.items():
        counts = sorted({run["gpus"] for run in found.values()})
        if len(counts) != 2:
            continue
        one, many = counts

        def of(gpus: int, key: str, found: dict = found) -> float:
            return statistics.fmean(run[key] for run in found.values() if run["gpus"] == gpus)
        summary[load] = {"gpus": [one, many],
                         "per_added_gpu_ms_from_medians": (of(many, "reading_ms_median") - of(one, "reading_ms_median")) / (many - one),
                         "per_added_gpu_ms_from_means": (of(many, "reading_ms_mean") - of(one, "reading_ms_mean")) / (many - one),
                         "one_gpu_reading_ms_median": of(one, "reading_ms_median"),
                         "many_gpus_reading_ms_median": of(many, "reading_ms_median")}
    result = {"command": " ".join(["python", *sys.argv]), "runs": runs, "summary": summary}
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
