"""The sandbox fleet: N real SSH hosts on one Linux machine, each with its own docker.

Layout (``fleet sandbox up``): host ``hK`` is a network namespace ``fsb-<name>-hK`` whose NIC
(``veth0``; ``ens1f0`` on h3) is a port of a bridge in the ctl namespace ``fsb-<name>-ctl``.  The
control side -- the fleet CLI, ansible, pytest -- stays in the ROOT namespace: a veth ``fsb<k>``
from the root namespace into that bridge carries ``198.18.<16k>.1/20``, so host addresses are
plain routable addresses here and nobody needs ``ip netns exec``.  While the sandbox exists the
root namespace keeps ``unreachable 198.18.0.0/15`` (metric 4200+k); the connected /20 is more
specific, everything else in the range is refused, and hosts have no default route, so no test
packet can leave the machine.

Each host runs, in its own mount+UTS namespace (``hostinit.py``): its hostname, its own /srv,
/run, /etc/fleet, /var/lib/fleet and cgroup mounts, an empty root ``~/.bashrc`` (this machine's
costs every SSH command), fake hardware tools and sysfs (``fakehw``),
an OpenSSH sshd (own ed25519 host key, key-only auth) and a dockerd+containerd (data-root seeded
from the image template, socket ``<hostdir>/run/docker.sock``, ``/var/run/docker.sock`` on the
host itself).
``--network host`` containers on hK live in hK's network.  When ``ip netns add`` is refused the
hosts fall back to sshd on 127.0.0.1:22001.. (``loopback`` mode; no network faults there).

``--systemd-hosts K`` adds hosts s1..sK of kind systemd (``systemd_host``): systemd as PID 1 of a
container with its own root filesystem and sshd, in its own namespace on the same bridge, with
``runtime: systemd`` in the inventory.

Modules: state (on-disk state), procs (PID+start-time refs, namespace scans), netns, sshd,
hostinit (runs inside a host), dockerd, image (stand-in image + data-root template), fakehw,
inventory, fleet (up/down/status), systemd_host (hosts of kind systemd), faults, router (real sglang-router venv), client (SSH handle),
standin/ (the engine stand-in shipped into the image).
"""
