"""The demo training job: one light process per simulated GPU, with the real agent."""
