"""Supervised jobs (`gpumix run`): the plan file a relaunched job reads, the launcher-command
rewriting, the supervisor that restarts a job under a new plan, automatic re-planning, and the
process-tree cleanup that makes a job die with its supervisor.

May import gpumix.wire, gpumix.plan and the hub's client; never the hub's core, the hardware or the TUI.
plan_file.py is imported by the agent: it stays standard library only."""
