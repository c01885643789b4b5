"""Power caps: setting and resetting them within each card's range with an audit log (caps),
fitting them to a machine budget at the least throughput cost (budget), and the GPU tiers both
group by (tiers).

May import gpumix.hw (the backend and its types); never the hub, the simulator or the TUI."""
