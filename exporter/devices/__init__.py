"""The device layer: the only code that calls NVML, and what it hands upward (the inventory and each
poll's readings)."""
