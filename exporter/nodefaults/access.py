"""The API server permissions each `--faults.*` option needs, and doctor's check of each
with a SelfSubjectAccessReview.

The same table is what the chart grants (charts/gpu-exporter/templates/clusterrole-faults.yaml)
and what docs/faults.md lists: a dry run keeps the reads and drops the writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.nodefaults.apihttp import ApiError, ApiHttp
from exporter.nodefaults.config import NodeFaultsConfig


@dataclass(frozen=True, slots=True)
class Permission:
    """One verb on one resource (core API group)."""

    verb: str
    resource: str
    subresource: str = ""
    write: bool = True
    """Left out in a dry run."""

    @property
    def shown(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {resource}"


CONDITION = (Permission("get", "nodes", "status", write=False),
             Permission("patch", "nodes", "status"))
EVENTS = (Permission("create", "events"), Permission("patch", "events"))
TAINT = (Permission("get", "nodes", write=False), Permission("list", "nodes", write=False),
         Permission("patch", "nodes"))


def needed(config: NodeFaultsConfig) -> list[Permission]:
    """Return the permissions the enabled options need (without writes in a dry run)."""
    wanted: list[Permission] = []
    for enabled, permissions in ((config.node_condition, CONDITION), (config.events, EVENTS),
                                 (config.taint, TAINT)):
        if enabled:
            wanted += [p for p in permissions if not (config.dry_run and p.write)]
    return wanted


def review(api: ApiHttp, permission: Permission, node_name: str | None) -> bool:
    """Return whether the API server says this ServiceAccount may do it (ApiError when it
    cannot be asked)."""
    attributes = {"verb": permission.verb, "resource": permission.resource, "group": ""}
    if permission.subresource:
        attributes["subresource"] = permission.subresource
    if permission.resource == "nodes" and permission.verb != "list" and node_name:
        attributes["name"] = node_name
    answer = api.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes}})
    return bool((answer.get("status") or {}).get("allowed"))


def check_permissions(api: ApiHttp, config: NodeFaultsConfig
                      ) -> list[tuple[bool, str]]:
    """Return (allowed, line) for each permission the enabled options need."""
    lines: list[tuple[bool, str]] = []
    for permission in needed(config):
        try:
            allowed = review(api, permission, config.node_name)
        except ApiError as exc:
            lines.append((False, f"{permission.shown}: could not ask the API server ({exc})"))
            continue
        lines.append((allowed, f"{permission.shown}: " + (
            "allowed" if allowed else "refused; grant it to the ServiceAccount (the chart "
            "does with the faults.* values)")))
    return lines
