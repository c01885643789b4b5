"""Several hubs (one per node) seen as one: the same snapshot()/series()/control() as a Hub.

`gpumix-top --hub ADDR --hub ADDR` polls every hub in parallel and merges:
GPUs from every node (each with its `node`, numbered anew in one list, UUIDs
kept unique), the ranks of a job from all nodes (global ranks as reported),
findings per node prefixed with the node's name. A control goes to the node
that owns the GPU (power) or runs the job's supervisor (replan). A node that
stops answering shows as unreachable (its GPUs lost, a finding) and comes
back when it answers again.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpumix.hub.ranks import mark_stragglers, runs_summary
from gpumix.power.tiers import tier_table
from gpumix.wire.snapshot_types import Snapshot, Source

RESULT_TYPES = {"power": "power_result", "replan": "replan_result", "supervisor": "supervisor_work"}


def _refused(request: dict[str, Any], message: str) -> dict[str, Any]:
    return {"type": RESULT_TYPES.get(str(request.get("type")), "result"), "ok": False, "message": message,
            "changes": []}


def node_labels(names: list[str]) -> list[str]:
    """Short labels for the GPU column (80 columns): the host's first word, at most 4 characters."""
    labels = [name.split(".")[0][:4] for name in names]
    if len(set(labels)) < len(labels):
        labels = [f"n{i + 1}" for i in range(len(names))]
    return labels


class MultiHubSource:
    def __init__(self, sources: list[Source], addresses: list[str] | None = None) -> None:
        if not sources:
            raise ValueError("no hubs to attach to")
        self.sources = sources
        self.addresses = addresses or [str(getattr(s, "socket_path", f"hub{i + 1}")) for i, s in enumerate(sources)]
        self._last: list[dict[str, Any] | None] = [None] * len(sources)
        self.reachable: list[bool] = [False] * len(sources)
        self._pool = ThreadPoolExecutor(max_workers=len(sources), thread_name_prefix="gpumix-multi")
        self._lock = threading.Lock()
        self._gpu_routes: dict[int, tuple[int, int]] = {}  # merged index -> (node, the node's index)
        self._job_nodes: dict[str, int] = {}  # job -> the node whose hub its supervisor reports to

    # -- reading --------------------------------------------------------------------------

    @staticmethod
    def _poll(source: Source) -> Snapshot | None:
        try:
            return source.snapshot()
        except Exception:  # one node's failure is that node unreachable, never the view's end
            return None

    def snapshot(self) -> Snapshot | None:
        results = list(self._pool.map(self._poll, self.sources))
        with self._lock:
            for i, result in enumerate(results):
                self.reachable[i] = result is not None
                if result is not None:
                    self._last[i] = result
            if all(last is None for last in self._last):
                return None
            return self._merge()

    def names(self) -> list[str]:
        """Each node's name: its hub's hostname (the address until it first answered), unique."""
        names: list[str] = []
        for i, last in enumerate(self._last):
            name = str((last or {}).get("hostname") or self.addresses[i])
            names.append(name if name not in names else f"{name}#{i + 1}")
        return names

    def _merge(self) -> Snapshot:
        names = self.names()
        labels = node_labels(names) if len(self.sources) > 1 else [None] * len(names)
        base = next(last for i, last in enumerate(self._last) if last is not None and self.reachable[i]) \
            if any(self.reachable) else next(last for last in self._last if last is not None)
        merged = dict(base)
        gpus: list[dict[str, Any]] = []
        ranks: list[dict[str, Any]] = []
        findings: list[dict[str, Any]] = []
        p2p: list[dict[str, Any]] = []
        jobs: dict[str, dict[str, Any]] = {}
        routes: dict[int, tuple[int, int]] = {}
        job_nodes: dict[str, int] = {}
        seen_uuids: set[str] = set()
        budgets: list[float | None] = []
        for i, last in enumerate(self._last):
            node, up = names[i], self.reachable[i]
            if last is None:
                findings.append(self._unreachable(node, i, []))
                continue
            index_map, uuid_map = self._add_gpus(i, node, labels[i], last, gpus, seen_uuids, routes)
            for rank in last.get("ranks", []):
                ranks.append(dict(rank, node=node, gpu_uuid=uuid_map.get(rank.get("gpu_uuid"), rank.get("gpu_uuid")),
                                  connected=bool(rank.get("connected")) and up, straggler=False))
            for link in last.get("p2p") or []:
                if link.get("gpu_a") in index_map and link.get("gpu_b") in index_map:
                    p2p.append(dict(link, gpu_a=index_map[link["gpu_a"]], gpu_b=index_map[link["gpu_b"]], node=node))
            if up:
                for finding in last.get("findings", []):
                    findings.append(dict(finding, node=node, title=f"{node}: {finding.get('title', '')}",
                                         gpus=[index_map.get(g, g) for g in finding.get("gpus", [])]))
                for job, status in (last.get("jobs") or {}).items():
                    jobs.setdefault(job, dict(status, node=node))
                    job_nodes.setdefault(job, i)
            else:
                findings.append(self._unreachable(node, i, list(index_map.values())))
            budgets.append(last.get("power_budget_w"))
        ranks.sort(key=lambda r: (r.get("job") or "", r.get("rank") or 0, r["node"]))
        mark_stragglers(ranks)
        run, runs = runs_summary(ranks)
        for gpu in gpus:  # the ranks on each GPU, as the merged list has them (connected ones)
            gpu["ranks"] = [r["rank"] for r in ranks if r["gpu_uuid"] == gpu["uuid"] and r["connected"]]
        self._gpu_routes, self._job_nodes = routes, job_nodes
        merged.update(
            hostname=", ".join(name if self.reachable[i] else f"{name} ✖" for i, name in enumerate(names)),
            timestamp_s=max(last["timestamp_s"] for last in self._last if last is not None),
            nodes=[{"name": name, "address": self.addresses[i], "reachable": self.reachable[i],
                    "label": labels[i]} for i, name in enumerate(names)],
            gpus=gpus, ranks=ranks, run=run, runs=runs, p2p=p2p, jobs=jobs,
            power_budget_w=sum(b for b in budgets if b is not None) if budgets and None not in budgets else None,
        )
        merged["tiers"] = tier_table(merged)
        severity = {"error": 0, "warning": 1, "info": 2}
        merged["findings"] = sorted(findings, key=lambda f: severity.get(f.get("severity", "info"), 3))
        return merged

    def _add_gpus(self, i: int, node: str, label: str | None, last: Snapshot, gpus: list[dict[str, Any]],
                  seen_uuids: set[str], routes: dict[int, tuple[int, int]]) -> tuple[dict[int, int], dict[str, str]]:
        """Node i's GPUs appended to the merged list, renumbered; (its index -> merged index, its UUID ->
        merged UUID). An unreachable node's GPUs show as lost."""
        index_map: dict[int, int] = {}
        uuid_map: dict[str, str] = {}
        for gpu in last.get("gpus", []):
            row = dict(gpu, node=node, node_index=gpu["index"], index=len(gpus))
            if label is not None:
                row["node_label"] = label
            if row["uuid"] in seen_uuids:  # simulated rigs (or a node listed twice) repeat UUIDs
                row["uuid"] = f"{node}/{gpu['uuid']}"
            seen_uuids.add(row["uuid"])
            index_map[gpu["index"]] = row["index"]
            uuid_map[gpu["uuid"]] = row["uuid"]
            routes[row["index"]] = (i, gpu["index"])
            if not self.reachable[i]:
                row["lost"] = True
                row["ranks"] = []
            gpus.append(row)
        return index_map, uuid_map

    def _unreachable(self, node: str, i: int, gpus: list[int]) -> dict[str, Any]:
        return {"id": "node-unreachable", "severity": "error", "title": f"node {node} unreachable",
                "evidence": f"the hub at {self.addresses[i]} does not answer; its GPUs show as lost until it does",
                "fix": "check that `gpumix hub` runs on that node and the network (or ssh -L tunnel) is up",
                "gpus": gpus, "node": node}

    def series(self, index: int, name: str) -> list[float | None]:
        route = self._gpu_routes.get(index)
        if route is None or not self.reachable[route[0]]:
            return []
        try:
            return self.sources[route[0]].series(route[1], name)
        except Exception:
            return []

    # -- controls -------------------------------------------------------------------------

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        kind = request.get("type")
        if kind == "power":
            return self._power(request)
        if kind == "replan":
            job = str(request.get("job"))
            node = self._job_nodes.get(job)
            if node is None:
                return _refused(request, f"no attached node runs a supervisor for job {job!r}")
            return self._send(node, request)
        return _refused(request, f"{kind!r} cannot be routed across nodes: talk to one hub")

    def _send(self, node: int, request: dict[str, Any]) -> dict[str, Any]:
        if not self.reachable[node]:
            return _refused(request, f"node {self.names()[node]} unreachable")
        try:
            return self.sources[node].control(request)
        except Exception as error:
            return _refused(request, f"node {self.names()[node]}: {error}")

    def _power(self, request: dict[str, Any]) -> dict[str, Any]:
        action = request.get("action")
        names = self.names()
        split: dict[int, dict[str, Any]] = {}  # node -> its part of the request, in its own indices
        if action in ("set", "reset"):
            gpus = request.get("gpus")
            if not isinstance(gpus, list) or not gpus:
                return _refused(request, "name the GPUs by index")
            for gpu in gpus:
                route = self._gpu_routes.get(gpu) if isinstance(gpu, int) and not isinstance(gpu, bool) else None
                if route is None:
                    return _refused(request, f"no GPU {gpu!r} on the attached nodes")
                split.setdefault(route[0], dict(request, gpus=[]))["gpus"].append(route[1])
        elif action == "caps":
            caps = request.get("caps")
            if not isinstance(caps, dict) or not caps:
                return _refused(request, "caps must map GPU indices to watts")
            for key, watts in caps.items():
                route = self._gpu_routes.get(int(key)) if str(key).isdigit() else None
                if route is None:
                    return _refused(request, f"no GPU {key!r} on the attached nodes")
                split.setdefault(route[0], dict(request, caps={}))["caps"][str(route[1])] = watts
        elif action == "fit":
            # Each node has its own PSU: without a node named, every node fits its own budget.
            node = request.get("node")
            targets = [i for i, name in enumerate(names) if name == node] if node else list(range(len(self.sources)))
            if not targets:
                return _refused(request, f"no node {node!r} (nodes: {', '.join(names)})")
            if len(targets) > 1 and request.get("budget_w") is not None:
                return _refused(request, "a budget in watts is one node's power supply: name the node")
            for target in targets:
                split[target] = {k: v for k, v in request.items() if k != "node"}
        else:
            return _refused(request, f"unknown power action {action!r}")
        down = [names[i] for i in split if not self.reachable[i]]
        if down:
            return _refused(request, f"node {', '.join(down)} unreachable: nothing changed")
        if len(split) > 1 and not request.get("dry_run"):  # all or nothing across nodes: check every part first
            for node, part in split.items():
                check = self._send(node, dict(part, dry_run=True))
                if not check.get("ok"):
                    return {**check, "message": f"{names[node]}: {check.get('message')} (nothing changed)",
                            "changes": []}
        replies = {node: self._send(node, part) for node, part in split.items()}
        return self._merge_power(replies, names)

    def _merge_power(self, replies: dict[int, dict[str, Any]], names: list[str]) -> dict[str, Any]:
        back = {(node, local): merged for merged, (node, local) in self._gpu_routes.items()}
        changes: list[dict[str, Any]] = []
        for node, reply in replies.items():
            for change in reply.get("changes") or []:
                local = change.get("gpu_index")
                changes.append(dict(change, gpu_index=back.get((node, local), local), node=names[node]))
        if len(replies) == 1:
            ((node, reply),) = replies.items()
            result = dict(reply, changes=changes)
            if isinstance(reply.get("fit"), dict):
                fit = dict(reply["fit"])
                fit["gpus"] = [dict(g, index=back.get((node, g.get("index")), g.get("index")))
                               for g in fit.get("gpus", [])]
                result["fit"] = fit
            return result
        merged = {"type": "power_result", "ok": all(r.get("ok") for r in replies.values()),
                  "message": "; ".join(f"{names[node]}: {r.get('message')}" for node, r in replies.items()),
                  "changes": changes}
        fits = {node: r["fit"] for node, r in replies.items() if isinstance(r.get("fit"), dict)}
        if fits and len(fits) == len(replies):  # every node fitted its own budget: one proposal to show
            merged["fit"] = {
                "budget_w": sum(f.get("budget_w") or 0.0 for f in fits.values()),
                "caps_before_w": sum(f.get("caps_before_w") or 0.0 for f in fits.values()),
                "caps_after_w": sum(f.get("caps_after_w") or 0.0 for f in fits.values()),
                "throughput_kept": min(f.get("throughput_kept", 1.0) for f in fits.values()),
                "gpus": [dict(g, index=back.get((node, g.get("index")), g.get("index")), node=names[node])
                         for node, f in fits.items() for g in f.get("gpus", [])],
            }
        return merged

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        for source in self.sources:
            closer = getattr(source, "close", None)
            if closer is not None:
                closer()
