"""Build tools: generators that read the repository and write what the package ships.

Nothing here is installed (`pyproject.toml` packages only `exporter*`), and nothing in
`exporter/` imports it (a forbidden contract in `pyproject.toml`). A generator's output is
committed inside the package, and a test fails when the two drift:

- `python -m tools.derive_dcgm_names --write`: `exporter/fields/dcgm-names.csv` from DCGM's
  field reference table (`tests/fixtures/dcgm-fields/dcgm-fields.csv`), with
  `tools/dcgm_recipes.py` working out how each field NVML serves is read
  (`tests/fields/test_dcgm_names.py` checks the drift).
"""
