"""`gpu-exporter generate`: committed artifacts match the generator byte for byte, the
command's errors are clear, and serving never imports the generator's libraries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.artifacts.conftest import run_generate
from tests.support.paths import ROOT

GENERATED_DIRS = ("dashboards", "alerts", "deploy/keda")


def _files(base: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for d in GENERATED_DIRS:
        for path in sorted((base / d).glob("*")):
            if path.suffix in (".json", ".yml", ".yaml"):
                out[str(path.relative_to(base))] = path.read_bytes()
    return out


def test_committed_artifacts_match_the_generator(tmp_path: Path) -> None:
    result = run_generate("all", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    fresh, committed = _files(tmp_path), _files(ROOT)
    assert sorted(fresh) == sorted(committed), "run `gpu-exporter generate all` and commit"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert stale == [], f"out of date, run `gpu-exporter generate all`: {stale}"


def test_generation_is_deterministic(tmp_path: Path) -> None:
    assert run_generate("all", "--out", str(tmp_path / "a")).returncode == 0
    assert run_generate("all", "--out", str(tmp_path / "b")).returncode == 0
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_bad_collectors_file_is_named(tmp_path: Path) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text("# fields\nDCGM_FI_DEV_GPU_UTILS, gauge, typo\n")
    result = run_generate("dashboards", "--collectors", str(csv), "--out", str(tmp_path))
    assert result.returncode == 2
    assert f"{csv}:2" in result.stderr
    missing = run_generate("alerts", "--collectors", str(tmp_path / "nope.csv"))
    assert missing.returncode == 2
    assert "nope.csv" in missing.stderr


def test_unknown_command_is_rejected() -> None:
    result = run_generate("grafana")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_serving_does_not_import_the_generator_libraries() -> None:
    code = (
        "import sys\n"
        "import exporter.cli\n"
        "try:\n"
        "    exporter.cli.main(['serve', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "import exporter.serve\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('grafanalib', 'yaml')\n"
        "             or m.startswith('exporter.artifacts'))\n"
        "print('LOADED', bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_generate_loads_them_only_when_asked(tmp_path: Path) -> None:
    """The check above can fail: the generate path does import both."""
    code = (
        "import sys\n"
        "from exporter.cli import main\n"
        f"main(['generate', 'all', '--out', {str(tmp_path)!r}])\n"
        "print('grafanalib' in sys.modules, 'yaml' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout.strip().splitlines()[-1] == "True True", result.stderr
