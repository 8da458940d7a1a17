"""The HPC job mapping directory as a workload manager leaves it, and as it may be broken: a
file per device names its jobs; nothing else in the directory labels anything, stops the
exporter or is complained about more than once."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from exporter.k8s.hpc_jobs import MAX_FILE_BYTES, HpcJobMapping, entity_key, parse_jobs
from tests.support.privileges import NOBODY, run_as


@pytest.mark.parametrize(("name", "key"), [
    ("0", (0, -1)), ("7", (7, -1)), ("12", (12, -1)), ("2.0", (2, 0)), ("3.10", (3, 10)),
])
def test_mapping_file_names(name: str, key: tuple[int, int]) -> None:
    assert entity_key(name) == key


@pytest.mark.parametrize("name", ["01", "+1", "1.", ".1", "1.02", "a", "0.swp", "1.2.3",
                                  " 1", "1\n", "\uff10"])  # the last: a full-width zero
def test_other_names_are_not_mapping_files(name: str) -> None:
    assert entity_key(name) is None


def test_job_ids_are_lines_each_once_in_file_order() -> None:
    assert parse_jobs("job-2\r\n\n  job 1  \njob-2\n") == ("job-2", "job 1")
    assert parse_jobs("") == ()
    assert parse_jobs("job\x00\n") is None
    assert parse_jobs("a\tb\n") is None


def test_a_directory_as_the_manager_writes_it(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("4711\n4712\n")
    (tmp_path / "1.3").write_text("mig-job\n")
    (tmp_path / "2").write_text("")  # no jobs: the device keeps its unlabelled series
    (tmp_path / "README").write_text("written by the prolog\n")
    assert HpcJobMapping(tmp_path).read() == {(0, -1): ("4711", "4712"),
                                              (1, 3): ("mig-job",)}


def test_broken_entries_label_nothing_and_are_reported_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "0").write_text("good\n")
    (tmp_path / "1").write_bytes(b"\xff\xfe binary")
    (tmp_path / "2").write_text("x" * (MAX_FILE_BYTES + 1))
    (tmp_path / "3").mkdir()
    os.mkfifo(tmp_path / "4")  # opening it would block the poll for good
    (tmp_path / "5").symlink_to(tmp_path / "nowhere")
    (tmp_path / "6").write_text("job\x1b[31m\n")
    mapping = HpcJobMapping(tmp_path)
    with caplog.at_level(logging.WARNING, logger="exporter.k8s.hpc_jobs"):
        assert mapping.read() == {(0, -1): ("good",)}
        assert mapping.read() == {(0, -1): ("good",)}
    problems = [r.getMessage() for r in caplog.records]
    assert len(problems) == 6, problems
    for name, why in (("1", "not a list of job ids"), ("2", "larger than"),
                      ("3", "not a regular file"), ("4", "not a regular file"),
                      ("5", "not a regular file"), ("6", "not a list of job ids")):
        assert any(p.startswith(f"{tmp_path / name}: {why}") for p in problems), (name, why)


def test_a_problem_that_comes_back_is_reported_again(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mapping = HpcJobMapping(tmp_path / "absent")
    with caplog.at_level(logging.WARNING, logger="exporter.k8s.hpc_jobs"):
        assert mapping.read() == {}
        assert mapping.read() == {}
        (tmp_path / "absent").mkdir()
        assert mapping.read() == {}
        (tmp_path / "absent").rmdir()
        assert mapping.read() == {}
    assert len(caplog.records) == 2
    assert "no series get an hpc_job label" in caplog.records[0].getMessage()


def _read_as_nobody(directory: Path) -> str:
    """Return what the mapping reads from `directory`, or "readable" if the secret is."""
    try:
        (directory / "0").read_text()
    except PermissionError:
        return repr(HpcJobMapping(directory).read())
    return "readable"


@pytest.mark.drops_privileges
def test_an_unreadable_file_labels_nothing() -> None:
    # Root reads files whatever their mode: as root (CI), the mapping is read by a process
    # that drops to `nobody`, as an unprivileged exporter would run.
    directory = Path(tempfile.mkdtemp(prefix="hpc-jobs-", dir="/tmp"))
    try:
        directory.chmod(0o755)
        (directory / "0").write_text("secret\n")
        (directory / "0").chmod(0)
        (directory / "1").write_text("job-1\n")
        (directory / "1").chmod(0o644)
        if os.geteuid() != 0:
            assert HpcJobMapping(directory).read() == {(1, -1): ("job-1",)}
            return
        # A forked child drops to nobody after the parent's imports, so the test never
        # depends on whether nobody could read the checkout.
        status, text = run_as(NOBODY, lambda: _read_as_nobody(directory))
        assert status == 0, text
        assert text == "{(1, -1): ('job-1',)}"
    finally:
        shutil.rmtree(directory, ignore_errors=True)
