"""Presets of `--kubernetes.pod-labels` (Dynamo, llm-d, KAI): the keys they copy, the names
they copy them under, their dcgm-exporter allow-list equivalents, and the role, queue and
model dimensions read back from series labels."""

from __future__ import annotations

import json
import re

import pytest

from exporter.config import parse_serve_args
from exporter.k8s.config import KubernetesConfig
from exporter.k8s.inference_labels import (
    DIMENSIONS,
    MODEL,
    PRESETS,
    QUEUE,
    ROLE,
    allowlist_regexes,
    parse_presets,
    preset_keys,
)
from exporter.k8s.pod_labels import PodLabelRules, allowlist_filter
from exporter.options import ConfigError
from tests.support.paths import ROOT

DYNAMO_POD = {
    "nvidia.com/dynamo-component-type": "worker",
    "nvidia.com/dynamo-sub-component-type": "prefill",
    "nvidia.com/dynamo-component": "VllmPrefillWorker",
    "nvidia.com/dynamo-graph-deployment-name": "qwen3-32b",
    "nvidia.com/dynamo-namespace": "inference-qwen3-32b",
    "nvidia.com/dynamo-base-model-hash": "45363f1d",
    "nvidia.com/dynamo-worker-hash": "5d8f2a91",
    "nvidia.com/selector": "qwen3-32b-vllmprefillworker",
    "kai.scheduler/queue": "chat",
    "pod-template-hash": "7d9c5b8f4",
}
LLM_D_POD = {
    "llm-d.ai/role": "decode",
    "llm-d.ai/model": "qwen3-8b",
    "llm-d.ai/inference-serving": "true",
    "llm-d.ai/guide": "pd-disaggregation",
    "kai.scheduler/queue": "search",
}
NEAR_MISSES = {
    # Keys an unanchored allow-list would also take; no preset may.
    "nvidia.com/dynamo-component-typo": "x",
    "example.nvidia.com/dynamo-namespace": "x",
    "llm-d.ai/roles": "x",
    "old.llm-d.ai/model": "x",
    "kai.scheduler/queue-name": "x",
}
EVERY_KEY = {**DYNAMO_POD, **LLM_D_POD, **NEAR_MISSES,
             "nvidia.com/dynamo-base-model": "qwen3-32b"}


def preset_rules(*names: str, pod_labels: str | None = None, enable_pod_labels: bool = False,
                 pod_label_allowlist: tuple[str, ...] = ()) -> PodLabelRules:
    return PodLabelRules.from_config(KubernetesConfig(
        pod_label_presets=names, pod_labels=pod_labels, enable_pod_labels=enable_pod_labels,
        pod_label_allowlist=pod_label_allowlist))


def test_inference_copies_every_stack_under_dcgm_names_without_uid() -> None:
    labels, dropped = preset_rules("inference").apply("uid-1", DYNAMO_POD)
    assert dropped == ()
    assert labels == (
        ("kai_scheduler_queue", "chat"),
        ("nvidia_com_dynamo_base_model_hash", "45363f1d"),
        ("nvidia_com_dynamo_component", "VllmPrefillWorker"),
        ("nvidia_com_dynamo_component_type", "worker"),
        ("nvidia_com_dynamo_graph_deployment_name", "qwen3-32b"),
        ("nvidia_com_dynamo_namespace", "inference-qwen3-32b"),
        ("nvidia_com_dynamo_sub_component_type", "prefill"),
    )
    assert preset_rules("inference").apply("uid-1", LLM_D_POD)[0] == (
        ("kai_scheduler_queue", "search"), ("llm_d_ai_model", "qwen3-8b"),
        ("llm_d_ai_role", "decode"))


@pytest.mark.parametrize("name", ["dynamo", "llm-d", "kai"])
def test_each_preset_copies_only_its_own_keys(name: str) -> None:
    labels, _ = preset_rules(name).apply("uid-1", EVERY_KEY)
    prefixes = {"dynamo": "nvidia_com_dynamo_", "llm-d": "llm_d_ai_", "kai": "kai_scheduler_"}
    assert labels
    assert all(label.startswith(prefixes[name]) for label, _ in labels)
    assert len(labels) == len(PRESETS[name].keys)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_allowlist_equivalent_copies_the_same_labels(name: str) -> None:
    """What deploy/README.md tells dcgm-exporter (and GPU Operator) users to set."""
    by_preset = preset_rules(name).apply("uid-1", EVERY_KEY)
    upstream = PodLabelRules(unprefixed=allowlist_filter(allowlist_regexes([name])))
    assert upstream.apply("uid-1", EVERY_KEY) == by_preset
    # The regexes survive the GPU Operator joining podLabelAllowlistRegex with commas.
    assert all("," not in regex for regex in allowlist_regexes([name]))


def test_preset_with_dcgm_allowlist_or_regex() -> None:
    both = preset_rules("kai", enable_pod_labels=True, pod_label_allowlist=("^kai\\.",
                                                                              "^team$"))
    labels, dropped = both.apply("u", {**LLM_D_POD, "team": "ml"})
    # A key both select is copied once, not reported as a duplicate.
    assert dropped == ()
    assert labels == (("kai_scheduler_queue", "search"), ("team", "ml"))
    with_regex = preset_rules("llm-d", pod_labels="team")
    assert with_regex.apply("u", {**LLM_D_POD, "team": "ml"})[0] == (
        ("pod_uid", "u"), ("label_team", "ml"), ("llm_d_ai_model", "qwen3-8b"),
        ("llm_d_ai_role", "decode"))


def test_option_takes_presets_beside_regexes() -> None:
    config = parse_serve_args(["--kubernetes.pod-labels", "inference"], {}).kubernetes
    assert (config.pod_labels, config.pod_label_presets) == (None, ("inference",))
    assert config.wants_pod_metadata
    config = parse_serve_args([], {"GPU_EXPORTER_POD_LABELS": "llm-d, kai"}).kubernetes
    assert config.pod_label_presets == ("llm-d", "kai")
    # Anything that is not a list of preset names is a regex, checked as before.
    config = parse_serve_args(["--kubernetes.pod-labels", "team|llm-d"], {}).kubernetes
    assert (config.pod_labels, config.pod_label_presets) == ("team|llm-d", ())
    assert parse_presets("llm-d,typo") is None
    with pytest.raises(ConfigError, match="not a valid regex"):
        parse_serve_args(["--kubernetes.pod-labels", "llm-d,("], {})


def test_preset_keys_are_unique_and_sanitise_apart() -> None:
    keys = preset_keys(["inference"])
    assert len(keys) == len(set(keys))
    names = {key.replace(".", "_").replace("/", "_").replace("-", "_") for key in keys}
    assert len(names) == len(keys)


@pytest.mark.parametrize(("labels", "role"), [
    ({"llm_d_ai_role": "prefill"}, "prefill"),
    # Dynamo, native: the component type is the phase.
    ({"nvidia_com_dynamo_component_type": "decode"}, "decode"),
    # Dynamo, `worker` + sub-type.
    ({"nvidia_com_dynamo_component_type": "worker",
      "nvidia_com_dynamo_sub_component_type": "prefill"}, "prefill"),
    ({"nvidia_com_dynamo_component_type": "frontend"}, None),
    ({"nvidia_com_dynamo_component_type": "worker"}, None),
    ({"llm_d_ai_role": ""}, None),
    ({}, None),
])
def test_role_from_either_stack(labels: dict[str, str], role: str | None) -> None:
    assert ROLE.value_of(labels) == role


def test_queue_and_model_dimensions() -> None:
    assert QUEUE.value_of({"kai_scheduler_queue": "chat"}) == "chat"
    assert MODEL.value_of({"llm_d_ai_model": "qwen3-8b"}) == "qwen3-8b"
    assert MODEL.value_of({"nvidia_com_dynamo_base_model": "qwen3-32b",
                           "nvidia_com_dynamo_base_model_hash": "45363f1d"}) == "qwen3-32b"
    assert MODEL.value_of({"nvidia_com_dynamo_base_model_hash": "45363f1d"}) == "45363f1d"
    assert sorted(DIMENSIONS) == ["model", "queue", "role"]
    # Every label a dimension reads is one a preset copies.
    copied = set(preset_keys(["inference"]))
    assert {s.key for d in DIMENSIONS.values() for s in d.sources} <= copied


def test_deploy_readme_gives_each_presets_allowlist() -> None:
    """The regexes deploy/README.md tells dcgm-exporter and GPU Operator users to set are the
    ones tested above to copy what the presets copy."""
    text = (ROOT / "deploy" / "README.md").read_text()
    listed = re.findall(r"^# (\S+)\n- '([^']+)'$", text, re.MULTILINE)
    assert dict(listed) == {name: allowlist_regexes([name])[0]
                            for name in ("dynamo", "llm-d", "kai")}
    patch = re.search(r"cluster-policy --type merge -p '(\{.*podLabelAllowlistRegex.*\})'", text)
    assert patch is not None
    exporter = json.loads(patch.group(1))["spec"]["dcgmExporter"]
    assert exporter == {"enablePodLabels": True,
                        "podLabelAllowlistRegex": list(allowlist_regexes(["inference"]))}
