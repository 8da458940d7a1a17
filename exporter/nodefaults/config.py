"""The settings of the node fault writer, resolved from `--faults.*` (all off by default)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONDITION_TYPE = "GPUHardwareReady"
"""True while no fatal fault is held on any GPU of the node."""
DEFAULT_TAINT_KEY = "gpu-exporter/gpu-fault"
DEFAULT_TAINT_MAX_SHARE = 0.5
DEFAULT_NODE_SELECTOR = "nvidia.com/gpu.present=true"
"""The label the GPU Operator's feature discovery puts on every GPU node."""


@dataclass(frozen=True, slots=True)
class NodeFaultsConfig:
    """What the writer writes, and where."""

    node_condition: bool = False
    condition_type: str = DEFAULT_CONDITION_TYPE
    events: bool = False
    taint: bool = False
    taint_key: str = DEFAULT_TAINT_KEY
    taint_max_share: float = DEFAULT_TAINT_MAX_SHARE
    """The taint is never added once this share of the selected nodes carries it."""
    node_selector: str = DEFAULT_NODE_SELECTOR
    """Label selector of the GPU nodes the share is counted over."""
    dry_run: bool = False
    """Log each write that would be made, one line each, and make none."""
    node_name: str | None = None
    """This node (`NODE_NAME`); the writer needs it."""

    @property
    def enabled(self) -> bool:
        """Whether anything is written (or, in dry run, logged)."""
        return self.node_condition or self.events or self.taint
