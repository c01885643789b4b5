"""The advisor: findings (severity, evidence, fix) from one snapshot. A pure function of the
snapshot and its settings: `advisor.py` the box's settings, links, budget and tiers;
`cpu_forwarding.py` the all-reduce through the CPU as a job's bottleneck; `field.py` the field's
lessons (DataParallel, uneven memory, launch-bound steps, mixed precision, supplies and circuits);
`probe_results.py` findings from kept `gpumix probe` results (read from its store, never measured
here); `finding.py` the record. Imports nothing else of gpumix but gpumix.power (tiers, supplies)
and gpumix.probe (its store and thresholds)."""
