"""Hosts on shaped links: network namespaces on one bridge, for benchmarks.

Each host is a network namespace of its own, joined to a bridge (in a
namespace of its own too, so nothing of the machine's own network changes)
by a veth pair, with an address from 198.18.0.0/15 (RFC 2544's range for
network tests). Both ends of a host's pair carry a token bucket (`tc qdisc
... tbf`) of one rate: the host's end shapes what it sends, the bridge's end
what it receives, so a host has a full-duplex link of that rate, as an
Ethernet port has. Making namespaces needs root and iproute2 (`ip`, `tc`).

    with hosts(3) as made:          # made: [Host, ...], the bridge's too
        shape(made, 50)             # 50 Mbit/s each way, every host
        subprocess.run(in_host(made[0], ["python", ...]))

Leaving the `with`, on success or failure, deletes every namespace it made,
which deletes the veth pairs and the bridge with them.
"""

import contextlib
import json
import os
import shutil
import subprocess
from typing import NamedTuple

# The hosts' addresses: 198.18.0.1, .2, ... of a /24 of RFC 2544's range.
SUBNET = "198.18.0.%d/24"
# A token bucket's depth: a few full-size TCP segments (a veth hands tbf
# segments of up to 64 KB, which tbf splits to fit), and how long a packet
# may wait in its queue before it is dropped: 1 s, a queue deep enough that
# the ring's 3 or 4 streams into one host drop nothing at 20 Mbit/s (with
# 100 ms, they moved 1.24 to 1.37 times the bytes, resent).
BURST = "64kb"
LATENCY = "1s"
# Seconds any one `ip` or `tc` command may take.
COMMAND_TIMEOUT_SECS = 30


class Host(NamedTuple):
    """One host: its namespace and its end of the link there; the bridge's
    namespace and its end of the link; the host's address."""

    namespace: str
    end: str
    bridge: str
    bridge_end: str
    address: str


def missing():
    """Why shaped links cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    absent = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if absent:
        return "network namespaces need iproute2 (%s not found)" % (
            ", ".join(absent)
        )
    return None


def _run(*command):
    subprocess.run(
        command, check=True, capture_output=True, timeout=COMMAND_TIMEOUT_SECS
    )


@contextlib.contextmanager
def hosts(count):
    """Makes count hosts on one bridge; deletes them all at the end.

    Yields:
      A list of count `Host`s, addresses 198.18.0.1 to 198.18.0.<count>.
    """
    tag = "bl%d" % (os.getpid() % 100000)
    bridge = tag + "br"
    made = [bridge]
    try:
        _run("ip", "netns", "add", bridge)
        _run("ip", "-n", bridge, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", bridge, "link", "set", "br0", "up")
        result = []
        for index in range(count):
            name = "%sh%d" % (tag, index)
            host = Host(
                name,
                name,
                bridge,
                "%sb%d" % (tag, index),
                (SUBNET % (index + 1)).split("/")[0],
            )
            _run("ip", "netns", "add", host.namespace)
            made.append(host.namespace)
            _join(host, SUBNET % (index + 1))
            result.append(host)
        yield result
    finally:
        for namespace in made:
            subprocess.run(
                ["ip", "netns", "del", namespace],
                capture_output=True,
                timeout=COMMAND_TIMEOUT_SECS,
            )


def _join(host, cidr):
    """Links host's namespace to the bridge's by a veth pair, both up."""
    ends = (host.end, "type", "veth", "peer", "name", host.bridge_end)
    _run("ip", "link", "add", *ends)
    _run("ip", "link", "set", host.end, "netns", host.namespace)
    _run("ip", "link", "set", host.bridge_end, "netns", host.bridge)
    bridged = ("ip", "-n", host.bridge, "link", "set", host.bridge_end)
    _run(*bridged, "master", "br0")
    _run(*bridged, "up")
    _run("ip", "-n", host.namespace, "addr", "add", cidr, "dev", host.end)
    _run("ip", "-n", host.namespace, "link", "set", host.end, "up")
    _run("ip", "-n", host.namespace, "link", "set", "lo", "up")


def shape(made, mbits):
    """Sets every host's link to mbits Mbit/s each way (tbf on both ends).

    Args:
      made: the `Host`s of `hosts`.
      mbits: float, the rate in Mbit/s; None takes the buckets away (the
        veth's own speed, gigabytes per second).
    """
    bucket = ("tbf", "rate", "%gmbit" % (mbits or 0), "burst", BURST)
    for host in made:
        for namespace, device in (
            (host.namespace, host.end),
            (host.bridge, host.bridge_end),
        ):
            qdisc = ("tc", "-n", namespace, "qdisc")
            if mbits is None:
                # No bucket to take away is no error.
                subprocess.run(
                    [*qdisc, "del", "dev", device, "root"],
                    capture_output=True,
                    timeout=COMMAND_TIMEOUT_SECS,
                )
                continue
            root = ("replace", "dev", device, "root")
            _run(*qdisc, *root, *bucket, "latency", LATENCY)


def counters(host):
    """(bytes sent, bytes received) so far on host's end of its link."""
    shown = subprocess.run(
        ["ip", "-n", host.namespace, "-s", "-j", "link", "show", host.end],
        check=True,
        capture_output=True,
        timeout=COMMAND_TIMEOUT_SECS,
    )
    stats = json.loads(shown.stdout)[0]["stats64"]
    return stats["tx"]["bytes"], stats["rx"]["bytes"]


def in_host(host, command):
    """command (a list) run inside host's namespace."""
    return ["ip", "netns", "exec", host.namespace, *command]
