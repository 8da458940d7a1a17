"""The label budget cuts copied pod labels only, the last by name first, and counts it."""

from __future__ import annotations

from exporter.exposition.label_limit import LabelLimit
from exporter.series import Family, Sample

OWN = (("gpu", "0"), ("UUID", "GPU-a"), ("pci_bus_id", "0:1"), ("device", "nvidia0"),
       ("modelName", "H100"), ("Hostname", "n"), ("container", "c"), ("namespace", "ns"),
       ("pod", "p"), ("pod_uid", "u"))
COPIED = (("app", "a"), ("label_team", "t"), ("tier", "x"), ("zone", "z"))
DRA = (("dra_claim_name", "claim"),)


def family(*label_sets: tuple[tuple[str, str], ...]) -> Family:
    return Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "t", tuple(Sample(ls, 1.0)
                                                             for ls in label_sets))


def test_copied_labels_go_from_the_end_and_own_ones_stay() -> None:
    labels = (*OWN, *COPIED, *DRA)
    limit = LabelLimit(len(labels) - 1)  # the name counts: two must go
    (out,) = limit.apply([family(labels)])
    assert out.samples[0].labels == (*OWN, ("app", "a"), ("label_team", "t"), *DRA)
    assert limit.trimmed_series == 1


def test_a_series_of_own_labels_only_is_kept_whole() -> None:
    limit = LabelLimit(3)
    (out,) = limit.apply([family(OWN + DRA)])
    assert out.samples[0].labels == OWN + DRA
    assert limit.trimmed_series == 0


def test_series_within_the_limit_are_untouched_and_the_count_is_per_apply() -> None:
    short, long = OWN, (*OWN, *COPIED)
    limit = LabelLimit(len(OWN) + 2)
    first = limit.apply([family(short, long), family(long)])
    assert [len(s.labels) for f in first for s in f.samples] == [len(OWN), len(OWN) + 1,
                                                                  len(OWN) + 1]
    assert limit.trimmed_series == 2
    limit.apply([family(short)])
    assert limit.trimmed_series == 0


def test_no_limit_changes_nothing() -> None:
    families = [family((*OWN, *COPIED))]
    limit = LabelLimit(0)
    assert limit.apply(families) is families
