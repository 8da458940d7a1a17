"""`gpu-exporter doctor`: what stands between this node and labelled GPU metrics.

Each check prints one line — its verdict, what it found and, when something is wrong, the fix —
in the order a problem would hide the next one: NVML, the GPUs it shows, the kubelet's
pod-resources socket, the resource names and device ids the kubelet reports, (when pod
labels are asked for) the API server, and (with `--faults.*`) the node's fault condition and
each permission the node fault writer needs. The web config file, when one is given, comes
first: serve would not start without it. Exit status 1 when any check failed, else 0.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TextIO

from exporter.config import kubernetes_config
from exporter.doctor.fault_checks import check_node_faults
from exporter.doctor.kubelet_checks import check_enrichment, check_socket, kubelet_checks
from exporter.doctor.nvml_checks import check_nvml
from exporter.doctor.report import FAIL, INFO, WARN, Report
from exporter.doctor.web_checks import check_web_config
from exporter.options import ConfigError, Resolution, build_parser, parse_command_line
from exporter.options import serve_table as opt

DESCRIPTION = ("Check NVML, the GPUs, the kubelet pod-resources API and the API server; one "
               "line per check with the fix. Takes serve's flags and variables for what it "
               "checks. Exit status 1 if any check failed.")


def report_settings(settings: Resolution, report: Report) -> None:
    """Report one line per option not at its default, naming where its value came from: what
    the checks below ran with (and, in the exporter's pod, what serve runs with)."""
    for setting in settings.changed():
        report.line(INFO, "setting", setting.describe())
    for warning in settings.warnings():
        report.line(WARN, "setting", warning)


def main(argv: list[str], out: TextIO | None = None) -> int:
    """Run doctor with serve's flags `argv` (and its variables): print the settings, one line
    per check and a summary to `out` (standard output when None), and return 1 when any check
    failed, else 0."""
    report = Report(out or sys.stdout)
    try:
        settings = parse_command_line("doctor", argv, os.environ,
                                      build_parser("doctor", description=DESCRIPTION))
    except ConfigError as exc:
        report.line(FAIL, "setting", str(exc))
    else:
        report_settings(settings, report)
        _run_checks(settings, report)
    summary = ", ".join(f"{n} {v}" for v, n in sorted(report.verdicts.items()))
    print(f"doctor: {summary}; {'some checks failed' if report.failed else 'all checks passed'}",
          file=report.out)
    return 1 if report.failed else 0


def _run_checks(settings: Resolution, report: Report) -> None:
    """Run the checks in the order a problem would hide the next one: the web config, NVML,
    then, unless Kubernetes is skipped, the kubelet, the API server and the node faults."""
    check_web_config(settings[opt.WEB_CONFIG_FILE], report)
    inventory = check_nvml(settings, report)
    if settings[opt.SKIP_KUBERNETES]:
        return
    config = kubernetes_config(settings, enabled=True)
    if check_socket(config.pod_resources_socket, report):
        asyncio.run(kubelet_checks(config, inventory, settings[opt.KUBELET_TIMEOUT], report))
    # Virtual GPUs name the containers of GPU processes through the same pod watch.
    if config.pod_labels or config.pod_label_presets or config.virtual_gpus:
        check_enrichment(config, settings[opt.KUBECONFIG], report)
    check_node_faults(settings, settings[opt.KUBECONFIG], report)
