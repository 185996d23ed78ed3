"""First process of a sandbox host's private mount+UTS namespace; it ends by forking the host's
sshd and staying as its parent, a child subreaper that reaps every child until none is left: a
session's leftovers (a daemonized process, the sessions of a killed sshd) stay below this
process, whose PID (and sshd's) the harness recorded, where teardown finds them.  Run as
``python3 hostinit.py NAME HOSTDIR`` under ``[ip netns exec NS] unshare --mount --uts``.  Stdlib only; mounts via libc (one process,
not one ``mount`` exec per bind: a host needs about a hundred of them).

In the host's mount namespace it sets up:
- hostname NAME; ``/srv`` and ``/run`` bound to ``HOSTDIR/srv`` and ``HOSTDIR/run``; fleet's own
  state dirs ``/etc/fleet`` and ``/var/lib/fleet`` bound to ``HOSTDIR/etc-fleet`` and
  ``HOSTDIR/var-lib-fleet`` (each host has its own deployments, as separate machines would);
- root's ``~/.ssh`` bound to ``HOSTDIR/root-ssh``: each host has its own authorized_keys and
  known_hosts, as separate machines would (host-to-host logins, e.g. ``fleet weights``);
- an empty ``HOSTDIR/root-bashrc`` over root's ``~/.bashrc``, if this machine has one: bash runs
  that file for every command sshd starts, and this machine's (a developer's: ``pyenv init``)
  costs ~0.3 s per SSH command; a fleet host's root has none of it;
- the cgroup v1 hierarchies again (``ip netns exec`` mounts a fresh /sys that hides them, and
  dockerd refuses to start without the devices cgroup);
- ``HOSTDIR/fakehw/bin`` over ``/usr/local/sbin`` (first on root's PATH: fake nvidia-smi,
  ibv_devinfo, show_gids, npu-smi);
- if ``HOSTDIR/fakehw/sys/class/infiniband`` exists: /sys/class becomes a tmpfs holding the real
  class directories again plus that tree (sysfs itself refuses mkdir);
- if ``HOSTDIR/fakehw/dev/infiniband`` exists: /dev becomes a tmpfs holding the real entries
  again plus ``/dev/infiniband`` with character nodes of the real uverbs/rdma_cm numbers (docker
  ``--device`` accepts them; opening them fails, as on a host whose driver is gone).
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import socket
import sys

_libc = ctypes.CDLL(None, use_errno=True)
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
PR_SET_CHILD_SUBREAPER = 36
PRIVATE_DIRS = (("/etc/fleet", "etc-fleet"), ("/var/lib/fleet", "var-lib-fleet"))
CGROUPS = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids")


def mount(src: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc.mount(
        src.encode(), target.encode(), fstype.encode() if fstype else None, flags,
        data.encode() if data else None,
    )  # fmt: skip
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} {target}: {os.strerror(err)}")


def umount_lazy(target: str) -> None:
    _libc.umount2(target.encode(), MNT_DETACH)


def bind(src: str, target: str, recursive: bool = False) -> None:
    mount(src, target, None, MS_BIND | (MS_REC if recursive else 0))


def rebuild(path: str, stash: str) -> None:
    """Replaces ``path`` by a tmpfs that holds its old entries again (bind mounts, symlinks)."""
    os.makedirs(stash, exist_ok=True)
    bind(path, stash, recursive=True)
    mount("fleet-sandbox", path, "tmpfs", 0, "mode=755")
    for entry in os.scandir(stash):
        if entry.name == "infiniband":
            continue
        target = os.path.join(path, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.is_dir():
            os.mkdir(target)
            bind(entry.path, target, recursive=True)
        else:
            open(target, "w").close()
            bind(entry.path, target)
    umount_lazy(stash)


def hide_root_bashrc(hostdir: str) -> None:
    bashrc = os.path.join(pwd.getpwuid(0).pw_dir, ".bashrc")
    if not os.path.isfile(bashrc):
        return  # nothing to hide, and no mount point without creating a file on the shared root
    own = f"{hostdir}/root-bashrc"
    open(own, "w").close()
    bind(own, bashrc)


def main(name: str, hostdir: str) -> None:
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    socket.sethostname(name)
    bind(f"{hostdir}/srv", "/srv")
    bind(f"{hostdir}/run", "/run")
    for target, own in PRIVATE_DIRS:
        os.makedirs(target, exist_ok=True)  # an empty mount point on the shared filesystem
        bind(f"{hostdir}/{own}", target)
    hide_root_bashrc(hostdir)
    root_ssh = os.path.join(pwd.getpwuid(0).pw_dir, ".ssh")
    os.makedirs(root_ssh, mode=0o700, exist_ok=True)  # an empty mount point on the shared filesystem
    bind(f"{hostdir}/root-ssh", root_ssh)
    if not os.path.ismount("/sys/fs/cgroup/devices"):
        mount("cgroup", "/sys/fs/cgroup", "tmpfs", 0, "mode=755")
        for c in CGROUPS:
            os.mkdir(f"/sys/fs/cgroup/{c}")
            mount("cgroup", f"/sys/fs/cgroup/{c}", "cgroup", 0, c)
        os.mkdir("/sys/fs/cgroup/systemd")
        mount("cgroup", "/sys/fs/cgroup/systemd", "cgroup", 0, "none,name=systemd")
        os.mkdir("/sys/fs/cgroup/unified")
        mount("none", "/sys/fs/cgroup/unified", "cgroup2", 0)
    bind(f"{hostdir}/fakehw/bin", "/usr/local/sbin")
    fake_ib = f"{hostdir}/fakehw/sys/class/infiniband"
    if os.path.isdir(fake_ib):
        rebuild("/sys/class", f"{hostdir}/stash/sysclass")
        os.mkdir("/sys/class/infiniband")
        bind(fake_ib, "/sys/class/infiniband")
    if os.path.isdir(f"{hostdir}/fakehw/dev/infiniband"):
        rebuild("/dev", f"{hostdir}/stash/dev")
        os.mkdir("/dev/infiniband")
        for node in sorted(os.listdir(f"{hostdir}/fakehw/dev/infiniband")):
            major, minor = open(f"{hostdir}/fakehw/dev/infiniband/{node}").read().split(":")
            os.mknod(f"/dev/infiniband/{node}", 0o20666, os.makedev(int(major), int(minor)))
    sshd = shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin") or "/usr/sbin/sshd"
    keep((sshd, "-D", "-e", "-f", f"{hostdir}/sshd_config"))


def keep(argv: tuple[str, ...]) -> None:
    """Runs ``argv`` as a child and reaps every child (orphans become ours: child subreaper)
    until none is left; SIGTERM/SIGINT/SIGHUP are passed on to that child."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    pid = os.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.kill(pid, s))
    code = 0
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            sys.exit(code)
        if done == pid:
            code = os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
