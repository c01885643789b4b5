"""The advisor: findings (severity, evidence, fix) from one snapshot. A pure function of the
snapshot and its settings; imports nothing else of gpumix but gpumix.power.tiers."""
