"""Two hosts joined by one link: network namespaces for two-host runs.

Each host is a network namespace of its own, joined by a veth pair, with
an address from 198.18.0.0/15 (RFC 2544's range for network tests), so
that tasks in the two reach each other over a link that can be set down.
Making namespaces needs root (as in CI) and `ip`. `delete` deletes every
namespace `make` made, which deletes its end of the link too.

    hosts = make()                  # [(namespace, link end, address), ...]
    try:
        subprocess.run(["ip", "netns", "exec", hosts[0][0], ...])
    finally:
        delete(hosts)
"""

import os
import shutil
import subprocess

# The two hosts: namespace, link end, address (a /30 of 198.18.0.0/15).
HOSTS = (("a", "198.18.0.1"), ("b", "198.18.0.2"))


class Unavailable(RuntimeError):
    """Network namespaces cannot be made here."""


def missing():
    """Why the two hosts cannot be made here, or None if they can."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "network namespaces need root and iproute2's ip"
    return None


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def make():
    """Makes the two hosts, named after this process.

    Returns:
      [(namespace, link end, address)] of each host.

    Raises:
      Unavailable: `ip` refused to make them (what was made is deleted).
    """
    tag = "mg%d" % os.getpid()
    hosts = [("%s%s" % (tag, n), "%s%s" % (tag, n), a) for n, a in HOSTS]
    try:
        for namespace, _, _ in hosts:
            _ip("netns", "add", namespace)
        (ns_a, end_a, _), (ns_b, end_b, _) = hosts
        _ip("link", "add", end_a, "type", "veth", "peer", "name", end_b)
        for namespace, end, address in hosts:
            _ip("link", "set", end, "netns", namespace)
            _ip("-n", namespace, "addr", "add", address + "/30", "dev", end)
            _ip("-n", namespace, "link", "set", end, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        delete(hosts)
        raise Unavailable(
            "network namespaces cannot be made here: %s" % e.stderr
        ) from e
    return hosts


def delete(hosts):
    for namespace, _, _ in hosts:
        subprocess.run(
            ["ip", "netns", "del", namespace], capture_output=True, timeout=30
        )


def set_link(host, state):
    """Sets host's end of the link 'down' (as a pulled cable) or 'up'."""
    namespace, end, _ = host
    _ip("-n", namespace, "link", "set", end, state)
