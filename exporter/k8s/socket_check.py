"""Whether the kubelet's pod-resources socket can ever be reached as configured.

Checked once at start-up. A socket missing from a directory that exists is the kubelet not
(yet) serving: the exporter starts and retries, as it does when the kubelet restarts. What
no retry can fix stops the start instead, with one line: the socket's directory missing (the
hostPath not mounted, or a mistyped path), something other than a socket at the path, or a
socket this user may not connect to (the kubelet makes it root-only).
"""

from __future__ import annotations

import os
import stat

FLAG = "--kubernetes.pod-resources-socket"


def unusable_socket(path: str) -> str | None:
    """Return why the socket at `path` can never be used by this process, or None when it can."""
    directory = os.path.dirname(path) or "."
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.isdir(directory):
            return None  # The kubelet is not serving yet; the client retries.
        return (f"{FLAG} {path}: the directory {directory} does not exist; mount the "
                "kubelet's pod-resources directory there (hostPath "
                "/var/lib/kubelet/pod-resources, type Directory) or point the flag at the "
                "socket inside it")
    except PermissionError:
        return (f"{FLAG} {path}: permission denied on the path for uid {os.geteuid()}; the "
                "kubelet lets only uid 0 reach it: run as root (runAsUser: 0, no capability "
                "needed)")
    if not stat.S_ISSOCK(st.st_mode):
        return f"{FLAG} {path}: not a unix socket; point the flag at the kubelet's socket"
    if not os.access(path, os.R_OK | os.W_OK):
        return (f"{FLAG} {path}: uid {os.geteuid()} may not connect (it needs write "
                "permission on the socket, which the kubelet gives only uid 0): run as root "
                "(runAsUser: 0, no capability needed)")
    return None
