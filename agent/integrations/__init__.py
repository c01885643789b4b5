"""Framework integrations. Each module imports its framework; gpumix.agent itself never does."""
