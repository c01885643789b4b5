"""The product's step model: what it believes about a training step before and while it measures.

The step model with what each prediction stands on (step_model), compute curves learned from the
splits a job has run (compute_curve), and the priors used until measurements exist (priors). The simulated world (gpumix.sim) has physics of its own and must be
free to disagree: nothing here imports it, and it imports nothing here. Standard library only."""
