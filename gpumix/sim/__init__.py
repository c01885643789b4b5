"""The simulated rig: GPUs described in a TOML file, served through an NVML look-alike."""
