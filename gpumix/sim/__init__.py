"""The simulated world: GPUs described in a TOML rig file, moving by physics of their own, served
through an NVML look-alike. Imports only gpumix.hw (the records it fills) and gpumix.wire (bounded
file reads). No core part imports it: only the commands (gpumix.cli) open it."""
