"""A disk with no room, and proof from the system calls that nothing tried to write.

`full_directory` gives a directory nothing can be written into: a tiny tmpfs filled to the
last byte where this user may mount one (root), else a directory without write permission.
The exporter runs under `strace -f` tracing every file system call; `write_calls` lists
those that create, change or remove a file, or open one for writing, failed or not.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.exporter_process import ExporterProcess

_MUTATING = re.compile(
    r"\b(creat|mkdir|mkdirat|rename|renameat2?|unlink|unlinkat|rmdir|link|linkat|symlink|"
    r"symlinkat|truncate|mknod|mknodat|chmod|fchmodat|chown|lchown|fchownat|utimes|"
    r"utimensat|futimesat|setxattr|lsetxattr|removexattr|lremovexattr)\(")
_OPEN = re.compile(r"\b(open|openat|openat2)\((?P<args>.*)")
_WRITE_FLAGS = re.compile(r"\bO_(WRONLY|RDWR|CREAT|TRUNC|APPEND)\b")
_HARMLESS = ("/dev/null", "/dev/tty")


@contextlib.contextmanager
def full_directory(path: Path) -> Iterator[tuple[Path, str]]:
    """(the directory, how it was made full) for the duration of the block."""
    path.mkdir()
    mounted = False
    if os.geteuid() == 0:
        options = "size=64k,nr_inodes=64,mode=0777"
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                                 capture_output=True, check=False).returncode == 0
    try:
        if mounted:
            _fill(path)
            yield path, "a 64 KiB tmpfs filled to the last byte"
        else:
            path.chmod(0o555)
            how = ("a directory without write permission" if os.geteuid() != 0 else
                   "a directory root may still write to (no mount allowed here)")
            yield path, how
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)
        path.chmod(0o755)


def _fill(path: Path) -> None:
    try:
        with open(path / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    with contextlib.suppress(OSError):  # and every inode
        for i in range(1000):
            (path / f"f{i}").touch()


def write_calls(trace: Path) -> tuple[list[str], int]:
    """(the traced calls that would write, how many file system calls were traced)."""
    writes = []
    calls = 0
    for line in trace.read_text(errors="replace").splitlines():
        if "resumed>" in line or "+++" in line or "---" in line:
            continue
        calls += 1
        opened = _OPEN.search(line)
        if opened:
            if _WRITE_FLAGS.search(opened["args"]) and not any(
                    f'"{p}"' in line for p in _HARMLESS):
                writes.append(line.strip())
        elif _MUTATING.search(line):
            writes.append(line.strip())
    return writes, calls


def traced_pid(proc: ExporterProcess) -> int | None:
    """The exporter under `strace` (strace's first child), while it runs."""
    pid = proc.proc.pid
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    return None


def stop_traced(proc: ExporterProcess) -> None:
    """SIGTERM to the exporter itself (strace would only detach from it), then strace."""
    child = traced_pid(proc)
    if child is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGTERM)
        try:
            proc.proc.wait(10)  # strace exits with its tracee
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
    proc.stop()
