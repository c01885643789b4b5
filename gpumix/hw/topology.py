"""P2P and topology matrices as text, like `nvidia-smi topo -m` and `topo -p2p r/w`."""

from __future__ import annotations

from typing import Any

# P2P status as NVML words it (nvml_topology.P2P_STATUS), shortened as `nvidia-smi topo -p2p r` does
P2P_SHORT = {"OK": "OK", "GPU not supported": "GNS", "chipset not supported": "CNS", "topology not supported": "TNS",
             "disabled by regkey": "DIS", "not supported": "NS", "unknown": "U", None: "N/A"}
# Every word a matrix cell can hold, explained under the matrices (the NVLink count varies: NV1 ... NV18).
LEGEND = [
    "X the GPU itself · N/A not read (a lost GPU, or the driver does not say)",
    "NV# joined by # NVLinks, direct or through NVSwitches (NV4: four links)",
    "BOARD same board · PIX 1 PCIe switch · PXB several switches · PHB host bridge",
    "NODE within a NUMA node · SYS across the system (SMP interconnect)",
    "OK P2P works · GNS GPU not supported (GeForce) · CNS chipset not supported",
    "TNS topology not supported · DIS off by regkey · NS not supported · U unknown",
]


def topology_text(snapshot: dict[str, Any]) -> str:
    """P2P read status and topology per pair, like `nvidia-smi topo -m` and `topo -p2p r`."""
    count = len(snapshot["gpus"])
    pairs = {(link["gpu_a"], link["gpu_b"]): link for link in snapshot["p2p"]}

    def matrix(title: str, cell: Any) -> list[str]:
        lines = [title, "      " + "".join(f"GPU{b:<4}" for b in range(count))]
        for a in range(count):
            row = []
            for b in range(count):
                if a == b:
                    row.append("X")
                else:
                    link = pairs.get((min(a, b), max(a, b)))
                    row.append(cell(link) if link else "N/A")
            lines.append(f"GPU{a:<3}" + "".join(f"{value:<7}" for value in row))
        return lines

    lines = matrix("Topology (common ancestor)", lambda link: link["topology"] or "N/A")
    lines += [""] + matrix("P2P read", lambda link: P2P_SHORT.get(link["read"], link["read"]))
    lines += [""] + matrix("P2P write", lambda link: P2P_SHORT.get(link["write"], link["write"]))
    ok = sum(1 for link in snapshot["p2p"] if link["read"] == "OK")
    lines += ["", *LEGEND]
    lines += [
        f"{ok} of {len(snapshot['p2p'])} pairs can use P2P"
        + ("; the rest go through host memory (NCCL's SHM transport)." if ok < len(snapshot["p2p"]) else "."),
    ]
    return "\n".join(lines)
