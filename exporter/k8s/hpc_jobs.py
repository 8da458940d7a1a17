"""HPC job attribution from files (dcgm-exporter's `--hpc-job-mapping-dir`), for nodes run by
a workload manager rather than Kubernetes.

The manager's prolog writes one file per device it hands to a job, named after the GPU index
(`0`) or, for a MIG GPU instance, the GPU index and the GPU instance id (`2.1`), holding the
ids of the jobs on it, one per line; its epilog removes it. Each series of such a device is
then repeated once per job with an `hpc_job` label; a device without a file keeps one series
with no such label.

Read once per poll, off the event loop. Nothing in the directory can stop the exporter or put
a label on the wrong series: a name that is not exactly such a number is not a mapping file,
and a file that cannot be read, is too large, is not UTF-8 text or holds a line that is no
job id labels nothing. Each such problem is logged once, when it first appears.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from exporter import label_registry as names
from exporter.k8s.types import EntityKey

log = logging.getLogger(__name__)

HPC_JOB_LABEL = names.HPC_JOB
MAX_FILE_BYTES = 64 * 1024
"""A mapping file lists a few job ids; anything larger is not one."""

_FILE_NAME = re.compile(r"(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?")
"""Decimal numbers as the manager writes them; `01` or `+1` would be a guess."""

JobMap = Mapping[EntityKey, tuple[str, ...]]
"""The ids of the jobs on each entity, in file order, by entity key."""

NO_JOBS: JobMap = MappingProxyType({})


def entity_key(file_name: str) -> EntityKey | None:
    """Return the device that a mapping file's name points at, or None for any other file."""
    match = _FILE_NAME.fullmatch(file_name)
    if match is None:
        return None
    gpu, instance = match.groups()
    return int(gpu), -1 if instance is None else int(instance)


def parse_jobs(text: str) -> tuple[str, ...] | None:
    """Return the job ids of a file, each once; None when a line is not a job id (it holds
    control characters: the file is not a mapping file, or was caught half-written)."""
    jobs: dict[str, None] = {}
    for line in text.split("\n"):
        job = line.strip()
        if not job:
            continue
        if not job.isprintable():
            return None
        jobs[job] = None
    return tuple(jobs)


class HpcJobMapping:
    """The mapping directory; `read` it once per poll, from a worker thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._reported: frozenset[str] = frozenset()

    def read(self) -> JobMap:
        """Return the jobs on each device now. It never raises; each problem is logged once."""
        problems: list[str] = []
        jobs: dict[EntityKey, tuple[str, ...]] = {}
        try:
            with os.scandir(self.directory) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            problems.append(f"HPC job mapping directory {self.directory}: "
                            f"{exc.strerror or exc}; no series get an hpc_job label")
            entries = []
        for entry in entries:
            key = entity_key(entry.name)
            if key is None:
                continue
            listed = self._read_file(entry, problems)
            if listed:
                jobs[key] = listed
        self._report(problems)
        return jobs

    def _read_file(self, entry: os.DirEntry[str], problems: list[str]) -> tuple[str, ...]:
        skipped = "; its device's series get no hpc_job label"
        try:
            # Regular files only: opening a FIFO or a device would block or never end.
            if not entry.is_file():
                problems.append(f"{entry.path}: not a regular file{skipped}")
                return ()
            with open(entry.path, "rb") as file:
                data = file.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            problems.append(f"{entry.path}: cannot be read ({exc.strerror or exc}){skipped}")
            return ()
        if len(data) > MAX_FILE_BYTES:
            problems.append(f"{entry.path}: larger than {MAX_FILE_BYTES} bytes{skipped}")
            return ()
        try:
            jobs = parse_jobs(data.decode("utf-8"))
        except UnicodeDecodeError:
            jobs = None
        if jobs is None:
            problems.append(f"{entry.path}: not a list of job ids, one per line{skipped}")
            return ()
        return jobs

    def _report(self, problems: list[str]) -> None:
        for problem in problems:
            if problem not in self._reported:
                log.warning("%s", problem)
        self._reported = frozenset(problems)
