"""The simulated world: a GPU node, its kubelet, its pods and the faults that befall them.

`node` stands in for the `pynvml` module below the real NVML backend, `kubelet` serves the
node's devices to pods on a real pod-resources gRPC socket, `pods` stands in for the API
server's pod metadata (labels, UIDs, container ids, the processes' cgroup files). They stand
in below the same code a GPU node runs, so the demo and the tests drive the real sampling,
attribution and exposition.

No production module imports this package: only the `--backend sim` / `--sim.*` wiring of
`serve` and `doctor` does (an import-linter contract in pyproject.toml).
"""
