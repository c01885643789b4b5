"""Hardware layer: one interface (`HardwareBackend`), an NVML and a simulated backend."""
