"""`gpu-exporter advise`: the MIG layouts and time-slicing configs measured use fits, with the
GPUs and money they free.

Exit status 0 with the advice written, 1 when it could not be made (nothing is written
then), 2 for a bad option.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from exporter.advise.fitting import FitSettings
from exporter.advise.history import QUERIES, HistoryRequest, read_holders
from exporter.advise.plan import Advice, advise
from exporter.options import ConfigError, Resolution, build_parser, parse_command_line
from exporter.options import advise_table as opt
from exporter.options import report_table as shared
from exporter.options.exit_status import DONE, stopped
from exporter.partitions.mig_profiles import MODELS
from exporter.promql import duration
from exporter.report.cli import deliver
from exporter.report.connection import ReportError
from exporter.report.prices import load_prices
from exporter.report.prometheus_api import PrometheusClient
from exporter.report.request import connection

DESCRIPTION = ("The smallest MIG profile or time-sliced share each pod's measured use fits, "
               "packed per GPU model into as few GPUs as can be found; with the mig-parted "
               "and device-plugin configs that apply it and the GPUs and money it frees. "
               "Reads dcgm-exporter's series from Prometheus (or VictoriaMetrics, Thanos, "
               "Mimir).")


def _check(settings: Resolution) -> tuple[HistoryRequest, FitSettings]:
    given_end, given_start = settings[shared.END], settings[shared.START]
    end = time.time() if given_end is None else given_end
    start = end - settings[opt.LAST] if given_start is None else given_start
    if end <= start:
        raise ConfigError("--start must come before --end")
    if settings[opt.STEP] > end - start:
        raise ConfigError(f"--step {duration(settings[opt.STEP])}: the range "
                          f"{duration(end - start)} is shorter than --step")
    for option in (opt.MEMORY_QUANTILE, opt.COMPUTE_QUANTILE):
        if not 0 < settings[option] <= 1:
            raise ConfigError(f"{option.flag} {settings[option]:g}: expected a quantile above "
                              "0, up to 1")
    if not 0 <= settings[opt.HEADROOM] <= 1000:
        raise ConfigError(f"--headroom {settings[opt.HEADROOM]:g}: expected a percentage, 0 "
                          "to 1000")
    if settings[opt.MAX_REPLICAS] < 1:
        raise ConfigError("--max-replicas must be at least 1")
    if settings[opt.MIN_SAMPLES] < 0 or settings[opt.MIN_HOURS] < 0:
        raise ConfigError("--min-samples and --min-hours must not be negative")
    request = HistoryRequest(start, end, settings[opt.STEP], settings[shared.RESOLUTION],
                             settings[opt.MEMORY_QUANTILE],
                             settings[opt.COMPUTE_QUANTILE])
    fitting = FitSettings(settings[opt.HEADROOM] / 100, settings[opt.MIN_SAMPLES],
                          settings[opt.MIN_HOURS], settings[opt.MAX_REPLICAS])
    return request, fitting


def render(advice: Advice, fmt: str, everyone: bool) -> str:
    """Return the advice written in the format `--format` names: an HTML page, a mig-parted or
    device-plugin config, JSON, or a terminal table. With `everyone`, holders whose advice
    changes nothing are listed too."""
    if fmt == "html":
        from exporter.advise.layout_html import html_text

        return html_text(advice, everyone)
    if fmt in ("mig-parted", "device-plugin"):
        from exporter.advise.operator_configs import device_plugin_text, mig_parted_text

        return mig_parted_text(advice) if fmt == "mig-parted" else device_plugin_text(advice)
    from exporter.advise.render import json_text, table_text

    return json_text(advice, everyone) if fmt == "json" else table_text(advice, everyone)


def _unknown_models(advice: Advice) -> str | None:
    unknown = [(p.gpu_model, sum(1 for f in advice.fits if f.holder.gpu_model == p.gpu_model))
               for p in advice.pools if p.model is None]
    if not unknown:
        return None
    named = ", ".join(f"{model!r} ({count} holder{'s' if count != 1 else ''})"
                      for model, count in unknown)
    known = ", ".join(sorted(MODELS))
    return (f"GPU model {named} is not in the MIG profile table (known: {known}); pass "
            "--skip-unknown-models to advise the other pools")


def run(settings: Resolution) -> Advice:
    """Read the window's history from the server and return the advice for it. Raise ReportError
    when it cannot be made: no usable series, or a GPU model missing from the MIG profile table
    without `--skip-unknown-models`."""
    request, fitting = _check(settings)
    prices = load_prices(settings[shared.PRICE_FILE], settings[shared.PRICE], "--price-file")
    client = PrometheusClient(connection(settings, "flags"))
    planned, done = QUERIES, [0]
    mode = settings[shared.PROGRESS_OPTION]

    def progress() -> None:
        done[0] += 1
        if mode == "on" or (mode == "auto" and sys.stderr.isatty()):
            end = "\n" if done[0] >= planned else ""
            print(f"\rgpu-exporter advise: query {done[0]}/{planned}", end=end,
                  file=sys.stderr, flush=True)

    holders, counts = read_holders(client, request, progress)
    models = {h.gpu_model for h in holders}
    by_model = {m: (prices.price(m) if prices is not None else None) for m in models}
    advice = advise(holders, fitting, request.start, request.end, counts, by_model,
                    settings[opt.TIME_LIMIT])
    unknown = _unknown_models(advice)
    if unknown is not None and not settings[opt.SKIP_UNKNOWN]:
        raise ReportError(unknown)
    return advice


def main(argv: Sequence[str]) -> int:
    """Run `gpu-exporter advise` with the arguments `argv` and return its exit status: 0 once the
    advice is written, 1 when it could not be made, 2 for a bad option."""
    parser = build_parser("advise", description=DESCRIPTION)
    try:
        settings = parse_command_line("advise", argv, os.environ, parser)
        connection(settings, "flags")  # a bad connection option is a bad option
        _check(settings)
    except ConfigError as exc:
        return stopped("advise", exc)
    try:
        advice = run(settings)
        deliver("advise", render(advice, settings[opt.FORMAT], settings[opt.ALL]),
                settings[opt.OUTPUT])
    except (ConfigError, ReportError, OSError) as exc:
        return stopped("advise", exc)
    return DONE
