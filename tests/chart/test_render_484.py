"""The values dcgm-exporter's chart added in 4.8.3 and 4.8.4, rendered by Helm's engine: each
renders what it says, every object stays valid, and the exporter takes the args and env the
chart gives it."""

from __future__ import annotations

import pytest

from exporter.options.parsing import parse_command_line

from ._chart import (
    Obj,
    env,
    exporter,
    helm,
    objects,
    of_kind,
    one,
    render,
    validation_problems,
)


def _pod(objs: list[Obj]) -> Obj:
    spec: Obj = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def _volumes(objs: list[Obj]) -> dict[str, Obj]:
    return {v["name"]: v for v in _pod(objs)["volumes"]}


def _mounts(objs: list[Obj]) -> dict[str, Obj]:
    return {m["name"]: m for m in exporter(objs)["volumeMounts"]}


DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_a_digest_pins_the_image_and_the_tag_is_ignored() -> None:
    image = {"repository": "registry.example.com/gpu-exporter", "tag": "9.9.9", "digest": DIGEST}
    assert exporter(objects({"image": image}))["image"] == \
        f"registry.example.com/gpu-exporter@{DIGEST}"
    assert exporter(objects({"image": {**image, "digest": ""}}))["image"] == \
        "registry.example.com/gpu-exporter:9.9.9"


def test_the_config_file_is_made_mounted_and_named() -> None:
    data = "version: 2\nserver:\n  maxConcurrentScrapes: 8\n"
    objs = objects({"config": {"enabled": True, "data": data}})
    assert validation_problems(objs) == []
    config = next(c for c in of_kind(objs, "ConfigMap")
                  if c["metadata"]["name"] == "dcgm-exporter-config")
    assert config["data"] == {"config.yaml": data}
    assert config["metadata"]["namespace"] == one(objs, "DaemonSet")["metadata"]["namespace"]
    assert env(exporter(objs))["DCGM_EXPORTER_CONFIG_FILE"] == "/etc/dcgm-exporter/config.yaml"
    assert _volumes(objs)["dcgm-exporter-config"]["configMap"]["name"] == "dcgm-exporter-config"
    assert _mounts(objs)["dcgm-exporter-config"] == {
        "name": "dcgm-exporter-config", "mountPath": "/etc/dcgm-exporter/config.yaml",
        "subPath": "config.yaml", "readOnly": True}


def test_the_config_default_is_their_version_2_file() -> None:
    objs = objects({"config": {"enabled": True}})
    text = one(objs, "ConfigMap")["data"]["config.yaml"]
    assert text.startswith("version: 2\n")
    assert "file: /etc/dcgm-exporter/default-counters.csv" in text


def test_an_existing_config_configmap_is_mounted_not_made() -> None:
    objs = objects({"config": {"enabled": True, "create": False, "name": "site-exporter",
                               "key": "exporter.yaml", "mountPath": "/etc/site/exporter.yaml"}})
    assert of_kind(objs, "ConfigMap") == []
    assert _volumes(objs)["dcgm-exporter-config"]["configMap"]["name"] == "site-exporter"
    mount = _mounts(objs)["dcgm-exporter-config"]
    assert (mount["mountPath"], mount["subPath"]) == ("/etc/site/exporter.yaml", "exporter.yaml")
    assert env(exporter(objs))["DCGM_EXPORTER_CONFIG_FILE"] == "/etc/site/exporter.yaml"


def test_config_create_false_needs_a_name() -> None:
    helm_python = helm()
    with pytest.raises(helm_python.HelmRenderError,
                       match=r"config\.name must be set when config\.create is false"):
        render({"config": {"enabled": True, "create": False}})


def test_config_off_renders_nothing_of_it() -> None:
    objs = objects({"config": {"enabled": False, "create": False}})
    assert "DCGM_EXPORTER_CONFIG_FILE" not in env(exporter(objs))
    assert "dcgm-exporter-config" not in _volumes(objs)
    assert of_kind(objs, "ConfigMap") == []


def test_the_web_timeouts_are_always_set() -> None:
    assert {k: v for k, v in env(exporter(objects())).items() if "TIMEOUT" in k} == {
        "DCGM_EXPORTER_WEB_READ_TIMEOUT": "10s", "DCGM_EXPORTER_WEB_WRITE_TIMEOUT": "30s"}
    tuned = env(exporter(objects({"service": {"webReadTimeout": "5s",
                                              "webWriteTimeout": "2m"}})))
    assert (tuned["DCGM_EXPORTER_WEB_READ_TIMEOUT"], tuned["DCGM_EXPORTER_WEB_WRITE_TIMEOUT"]) \
        == ("5s", "2m")


def test_daemonset_annotations_go_on_the_daemonset_only() -> None:
    objs = objects({"daemonSetAnnotations": {"reloader.stakater.com/auto": "true"}})
    daemonset = one(objs, "DaemonSet")
    assert daemonset["metadata"]["annotations"] == {"reloader.stakater.com/auto": "true"}
    assert "annotations" not in daemonset["spec"]["template"]["metadata"]
    assert "annotations" not in one(objects(), "DaemonSet")["metadata"]


def test_the_optional_probe_fields_render_only_when_set() -> None:
    objs = objects({"livenessProbe": {"initialDelaySeconds": 45, "periodSeconds": 5,
                                      "timeoutSeconds": 4, "failureThreshold": 6},
                    "readinessProbe": {"periodSeconds": 15, "timeoutSeconds": 3,
                                       "failureThreshold": 2}})
    liveness, readiness = exporter(objs)["livenessProbe"], exporter(objs)["readinessProbe"]
    assert (liveness["timeoutSeconds"], liveness["failureThreshold"]) == (4, 6)
    assert (readiness["periodSeconds"], readiness["timeoutSeconds"],
            readiness["failureThreshold"]) == (15, 3, 2)
    # Helm merges maps, so a key is dropped by setting it to null; then it is not rendered
    # and Kubernetes' default applies.
    bare = exporter(objects({"livenessProbe": {"timeoutSeconds": None, "failureThreshold": None},
                             "readinessProbe": {"periodSeconds": None}}))
    assert "timeoutSeconds" not in bare["livenessProbe"]
    assert "failureThreshold" not in bare["livenessProbe"]
    assert "periodSeconds" not in bare["readinessProbe"]


def test_the_service_monitor_defaults_are_theirs_since_4_8_3() -> None:
    endpoint = one(objects(), "ServiceMonitor")["spec"]["endpoints"][0]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "25s")


@pytest.mark.parametrize(("values", "mounted"), [
    ({}, False),
    ({"kubernetes": {"enablePodLabels": True}}, True),
    ({"kubernetes": {"enablePodUID": True, "rbac": {"create": False}}}, True),
    ({"kubernetesDRA": {"enabled": True}}, True),
    ({"serviceAccount": {"automountServiceAccountToken": True}}, True),
    ({"serviceAccount": {"automountServiceAccountToken": False},
      "kubernetes": {"enablePodLabels": True}}, False),
    ({"serviceAccount": {"automountServiceAccountToken": None},
      "kubernetesDRA": {"enabled": True}}, True),
])
def test_the_token_is_derived_unless_set(values: Obj, mounted: bool) -> None:
    objs = objects(values)
    assert _pod(objs)["automountServiceAccountToken"] is mounted
    assert one(objs, "ServiceAccount")["automountServiceAccountToken"] is mounted


def test_no_arguments_no_args_stanza() -> None:
    assert "args" not in exporter(objects({"arguments": []}))
    assert exporter(objects({"arguments": ["-c", 5000]}))["args"] == ["-c", "5000"]


@pytest.mark.parametrize("compression", [True, False])
def test_debug_dump_passes_their_flags_and_mounts_nothing(compression: bool) -> None:
    plain = objects()
    dumping = objects({"debugDump": {"enabled": True, "directory": "/var/log/dumps",
                                     "retention": 6, "compression": compression},
                       "arguments": ["-c", "5000"]})
    args = exporter(dumping)["args"]
    assert args == ["-c", "5000", "--dump-enabled", "--dump-directory=/var/log/dumps",
                    "--dump-retention=6", f"--dump-compression={str(compression).lower()}"]
    # The exporter takes them (and logs that it writes no dumps).
    parse_command_line("serve", args, {})
    assert _volumes(dumping) == _volumes(plain)
    assert exporter(dumping)["volumeMounts"] == exporter(plain)["volumeMounts"]


@pytest.mark.parametrize("argument", ["--dump-compression", "--dump-compression=false"])
def test_debug_dump_refuses_compression_in_arguments(argument: str) -> None:
    helm_python = helm()
    with pytest.raises(helm_python.HelmRenderError,
                       match=r"arguments must not set --dump-compression when debugDump\.enabled"):
        render({"debugDump": {"enabled": True}, "arguments": [argument]})
    # Disabled, the flag is the user's own.
    assert exporter(objects({"arguments": [argument]}))["args"] == [argument]


def test_debug_dump_compression_must_be_a_boolean() -> None:
    helm_python = helm()
    with pytest.raises(helm_python.HelmValuesError, match="/debugDump/compression"):
        render({"debugDump": {"enabled": True, "compression": "yes"}})
