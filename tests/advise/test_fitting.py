"""Each holder's smallest fitting place, worked out by hand from the H100 and L4 figures of
the profile table (1g.10gb: 9,984 MiB and 1/7 of the compute; 1g.20gb: 20,096 MiB, 1/7;
2g.20gb: 20,096 MiB, 2/7; 3g.40gb: 40,448 MiB, 3/7; L4: 23,034 MiB)."""

from __future__ import annotations

import pytest

from exporter.advise.fitting import FitSettings, fit
from tests.advise.fleet import holder

SETTINGS = FitSettings(headroom=0.10, min_samples=30, min_hours=1.0, max_replicas=8)


@pytest.mark.parametrize(("peak", "compute", "advice"), [
    (8_000, 0.10, "1g.10gb"),    # 8,800 MiB <= 9,984; 10 % <= 1/7
    (9_500, 0.10, "1g.20gb"),    # 10,450 MiB > 9,984: the double-memory 1g
    (5_000, 0.20, "2g.20gb"),    # 20 % > 1/7 = 14.3 %: two compute slices
    (30_000, 0.30, "3g.40gb"),   # 33,000 MiB <= 40,448; 30 % <= 3/7
    (30_000, 0.50, "4g.40gb"),   # 50 % > 3/7 = 42.9 %; <= 4/7
    (37_000, 0.10, "whole"),     # 40,700 MiB > 40,448: only the whole GPU holds it
    (1_000, 0.90, "whole"),      # 90 % > 4/7: the 7g, which is the whole GPU
])
def test_smallest_mig_profile(peak: float, compute: float, advice: str) -> None:
    result = fit(holder("p", peak, compute), SETTINGS)
    assert result.advice == advice
    assert result.need_mib == pytest.approx(peak * 1.1)


def test_headroom_moves_the_boundary() -> None:
    # 9,000 MiB: 9,900 with 10 % (fits 1g.10gb), 10,800 with 20 % (does not).
    assert fit(holder("p", 9_000, 0.05), SETTINGS).advice == "1g.10gb"
    assert fit(holder("p", 9_000, 0.05), FitSettings(headroom=0.2)).advice == "1g.20gb"


def test_time_slicing_replicas_on_a_gpu_without_mig() -> None:
    # 5,000 MiB + 10 % = 5,500: 23,034 / 5,500 = 4.19 -> 4 by memory; 20 % -> 5 by compute.
    result = fit(holder("p", 5_000, 0.20, model="NVIDIA L4"), SETTINGS)
    assert (result.advice, result.max_replicas) == ("time-slicing", 4)
    # 60 % busy: 1 / 0.6 = 1.67 -> no second replica.
    assert fit(holder("p", 5_000, 0.60, model="NVIDIA L4"), SETTINGS).advice == "whole"


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"model": "NVIDIA B200"}, "GPU model 'NVIDIA B200' is not in the MIG profile table"),
    ({"samples": 29}, "29 samples, fewer than --min-samples 30"),
    ({"hours": 0.5}, "held 0.5 h, less than --min-hours 1"),
    ({"now": "1g.18gb"}, "holds '1g.18gb', not a MIG profile of NVIDIA H100 80GB HBM3"),
    ({"now": "mig", "gpu_instance": "3"}, "a MIG instance whose series carry no GPU_I_PROFILE"),
])
def test_not_advised_says_why(kwargs: dict[str, object], reason: str) -> None:
    result = fit(holder("p", 1_000, 0.1, **kwargs), SETTINGS)  # type: ignore[arg-type]
    assert result.advice is None
    assert result.reason == reason


def test_no_activity_series_is_not_guessed() -> None:
    result = fit(holder("p", 1_000, None), SETTINGS)
    assert result.advice is None
    assert "no activity series" in result.reason


def test_unchanged_advice() -> None:
    assert fit(holder("p", 8_000, 0.1, now="1g.10gb", gpu_instance="9"), SETTINGS).unchanged
    assert not fit(holder("p", 8_000, 0.1), SETTINGS).unchanged
