"""Supervised jobs (`gpumix run`): the launcher-command rewriting (launch_command.py), the supervisor
that restarts a job under a new plan (supervisor.py: the loop and the order of a restart), the
restart protocol's steps on the control folder (restart.py), the job's processes (job_process.py:
launch, stop, the watchdog), automatic re-planning (auto_replan.py), and the process-tree cleanup
that makes a job die with its supervisor (process_tree.py). The plan file a relaunched job reads is
gpumix/wire/plan_file.py.

May import gpumix.wire, gpumix.plan and the hub's client; never the hub's core, the hardware or the TUI."""
