"""The wire: what agents, the hub and clients say to each other (frames, messages, limits), who may
say it (tokens, TLS, peer credentials, signed controls) and where (socket paths).

Standard library only, and imports nothing else of gpumix: the agent imports it inside training
processes, so it must stay light."""
