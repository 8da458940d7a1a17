"""Doctor's checks of the node fault writer (`--faults.*`): the node's condition as a
restart would read it back, and one line per API server permission the enabled options
need, each asked with a SelfSubjectAccessReview."""

from __future__ import annotations

from exporter.config import faults_config
from exporter.doctor.report import FAIL, INFO, OK, Report
from exporter.options import ConfigError, Resolution

CHECK = "node faults"


def check_node_faults(settings: Resolution, kubeconfig: str | None, report: Report) -> None:
    """Report the node's fault condition and each permission; nothing when all is off."""
    try:
        config = faults_config(settings)
    except ConfigError as exc:
        report.line(FAIL, CHECK, str(exc))
        return
    if not config.enabled:
        return
    from exporter.nodefaults.access import check_permissions
    from exporter.nodefaults.apihttp import ApiError, ApiHttp, credentials
    from exporter.nodefaults.condition import find_condition, recorded_faults

    try:
        api = ApiHttp(credentials(kubeconfig), timeout_s=10.0)
    except Exception as exc:
        report.line(FAIL, CHECK, f"no API server credentials ({exc})",
                    "run in a pod with a ServiceAccount token or set KUBECONFIG")
        return
    if config.node_condition:
        try:
            node = api.request("GET", f"/api/v1/nodes/{config.node_name}/status")
        except ApiError as exc:
            report.line(FAIL, CHECK, f"cannot read node {config.node_name}: {exc}")
        else:
            if find_condition(node, config.condition_type) is None:
                report.line(INFO, CHECK, f"node {config.node_name} has no "
                            f"{config.condition_type} condition yet (serve writes it)")
            else:
                held = recorded_faults(node, config.condition_type)
                report.line(INFO, CHECK, f"node {config.node_name} condition "
                            f"{config.condition_type} records {len(held)} held fault(s)")
    mode = " (dry run: reads only)" if config.dry_run else ""
    for allowed, line in check_permissions(api, config):
        report.line(OK if allowed else FAIL, CHECK, line + (mode if allowed else ""))

