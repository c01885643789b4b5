"""The per-rank batch split: the planner (prediction and integer search), its inputs from a
snapshot, compute curves learned from earlier splits, and DeepSpeed configs for a plan.

Pure functions of snapshots and numbers. May import gpumix.wire.plan_file (the plan's file format);
never the hub, the hardware, the simulator or the TUI."""
