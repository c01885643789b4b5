"""The demo training job: one light process per simulated GPU with the real agent, under the real
supervisor. Part of the simulated world: it may import the agent, the hub, gpumix.run and the simulator;
only the commands start it."""
