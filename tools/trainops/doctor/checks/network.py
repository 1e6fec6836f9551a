"""Reaching the other ranks over IP: the interfaces NCCL and Gloo bind, NCCL's bootstrap
connections, the c10d TCP store and torchrun's rendezvous."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from trainops import nccl
from trainops.doctor import events as ev
from trainops.doctor.findings import Context, Found, check, who
from trainops.model import ERROR, WARNING

# Interfaces other nodes cannot reach: container bridges and the host ends of their veth
# pairs, libvirt bridges, point-to-point tunnels.
UNROUTABLE_PREFIXES = ("docker", "veth", "virbr", "br-", "ip6tnl", "sit", "tap")


def unroutable_name(name: str) -> bool:
    tunnel = name.startswith("tun") and name[3:4].isdigit()
    return name == "lo" or tunnel or name.startswith(UNROUTABLE_PREFIXES)


def unroutable_address(address: str | None) -> str | None:
    """Why an address cannot be reached from another node, or None."""
    if not address:
        return None
    host = address.split("%", 1)[0].strip("[]")
    if host.startswith("::ffff:"):
        host = host.removeprefix("::ffff:")
    if host in ("localhost",):
        return "loopback"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return "loopback" if ip.is_loopback else None


def _ifname_fix(ctx: Context, variable: str = "NCCL_SOCKET_IFNAME") -> str:
    fix = (
        f"Set {variable} to the interface that routes between the nodes (in pods the Multus "
        "interface such as net1, or eth0)"
    )
    if variable == "GLOO_SOCKET_IFNAME":
        fix += "; Gloo takes one interface name, not NCCL's ^/= lists"
    if ctx.expectation.overlay:
        fix += f"; the profile's interface: {ctx.interface_keys()}"
    return fix + "."


@check(
    "unroutable-interface",
    ERROR,
    "NCCL and Gloo use an interface the other nodes can reach",
    "By default NCCL and Gloo pick an interface or resolve the hostname; in containers that "
    "can be loopback, a docker bridge, a veth end or a tunnel, which no other node reaches, so "
    "connections are refused or time out.",
    "Set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the interface that routes between "
    "the nodes.",
)
def unroutable(ctx: Context) -> Iterator[Found]:
    # nccl-tests lists every rank with its host: when all are on one host, no other node
    # has to reach this one, and loopback serves every rank.
    hosts = {e.fields["host"] for e in ctx.of(ev.TESTS_STARTED) if e.fields.get("host")}
    if len(hosts) == 1:
        return
    bad_nccl = []
    for event in ctx.of(ev.BOOTSTRAP_IFS, ev.SOCKET_IFS):
        for name, address in event.fields["interfaces"]:
            if name == "lo":
                why = "loopback"
            elif unroutable_name(name):
                why = "a container bridge, veth or tunnel interface"
            else:
                why = unroutable_address(address)
            if why:
                bad_nccl.append((event, name, address, why))
    if bad_nccl:
        names = sorted({f"{name} ({address}, {why})" for _, name, address, why in bad_nccl})
        events = [event for event, *_ in bad_nccl]
        connect = [e for e in ctx.of(ev.SOCKET_CONNECT) if not e.fields.get("retrying")]
        severity = ERROR if connect or ctx.failed else WARNING
        yield Found(
            f"NCCL on {who(events)} uses interfaces other nodes cannot reach: {', '.join(names)}",
            events + connect[:2],
            fix=_ifname_fix(ctx),
            severity=severity,
        )
    gloo, fallback = _gloo_loopback(ctx)
    if gloo or fallback:
        addresses = sorted({a for e in gloo for a in (e.fields["remote"], e.fields["local"]) if a})
        shown = f" ({', '.join(addresses)})" if addresses else ""
        yield Found(
            f"Gloo on {who(gloo + fallback)} advertised a loopback address{shown}: the "
            "hostname resolves to loopback (typical in containers and with hostNetwork), so "
            "the other nodes connect to themselves",
            gloo + fallback,
            fix=_ifname_fix(ctx, "GLOO_SOCKET_IFNAME"),
        )


def _gloo_loopback(ctx: Context) -> tuple[list, list]:
    """Gloo connections to or from loopback, and Gloo's own loopback fallback warnings."""
    gloo = [
        e
        for e in ctx.of(ev.GLOO_CONNECT)
        if unroutable_address(e.fields["remote"]) or unroutable_address(e.fields["local"])
    ]
    return gloo, ctx.of(ev.GLOO_LOOPBACK)


@check(
    "socket-ifname-unmatched",
    ERROR,
    "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME match an interface of the process",
    "A name that matches no interface leaves NCCL without a bootstrap interface (it fails, "
    "sometimes with a meaningless address family) and makes Gloo fail at once.",
    "Name an interface that exists inside the pod (`ip addr`), with NCCL's ^/= syntax only "
    "for NCCL_SOCKET_IFNAME.",
)
def ifname_unmatched(ctx: Context) -> Iterator[Found]:
    missing = ctx.of(ev.NO_INTERFACE, ev.BAD_ADDRESS_FAMILY)
    if missing:
        values = sorted(
            {e.fields["value"] for e in ctx.of(ev.ENV) if e.fields["name"] == "NCCL_SOCKET_IFNAME"}
        )
        if values:
            described = ", ".join(values)
            message = (
                f"NCCL_SOCKET_IFNAME={described} matches no interface on {who(missing)}: NCCL "
                "found no socket interface to bootstrap with"
            )
        else:
            message = (
                f"NCCL found no usable socket interface on {who(missing)} (none up besides "
                "loopback, or NCCL_SOCKET_IFNAME set somewhere names none)"
            )
        yield Found(message, missing + ctx.of(ev.ENV)[:1], fix=_ifname_fix(ctx))
    for event in ctx.of(ev.GLOO_NO_INTERFACE):
        name = event.fields["name"]
        if event.fields.get("hostname"):
            yield Found(
                f"Gloo found no local address for the host name {name}: with GLOO_SOCKET_IFNAME "
                "unset Gloo resolves the host's own name and binds to one of its addresses, and "
                f"none of the addresses {name} resolves to is on this host (or it resolves to "
                "none)",
                [event],
                fix="Set GLOO_SOCKET_IFNAME to the interface that routes between the nodes "
                f"(ip addr shows it), or make {name} resolve to an address of this host "
                "(/etc/hosts, the cluster's DNS).",
            )
            continue
        exact, exclude, entries = nccl.parse_selector(name)
        syntax = (
            f": {name!r} is NCCL's list syntax, Gloo takes one concrete interface name"
            if exclude or exact or len(entries) > 1
            else ""
        )
        yield Found(
            f"GLOO_SOCKET_IFNAME={name} names no interface of the process{syntax}",
            [event],
            fix=_ifname_fix(ctx, "GLOO_SOCKET_IFNAME"),
        )


@check(
    "bootstrap-connect-failed",
    ERROR,
    "NCCL's bootstrap and socket connections succeed",
    "NCCL connects to every peer over TCP during init; refused connections mean the peer "
    "is gone or listens on another address, timeouts mean a firewall or a route in between.",
    "Check that the peer's address is on the interface NCCL_SOCKET_IFNAME names, that no "
    "firewall or NetworkPolicy blocks TCP between the pods, and whether the peer died first.",
    secondary=True,
)
def bootstrap_connect(ctx: Context) -> Iterator[Found]:
    failed = [e for e in ctx.of(ev.SOCKET_CONNECT) if not e.fields.get("retrying")]
    if not failed:
        return
    targets = sorted({e.fields["address"] for e in failed if e.fields["address"]})
    reasons = sorted({e.fields["reason"] for e in failed})
    target = f" to {', '.join(targets[:3])}" if targets else ""
    message = f"NCCL on {who(failed)} could not connect{target} ({'; '.join(reasons)})"
    listed = {e.fields["listed"] for e in ctx.of(ev.TESTS_STARTED) if "listed" in e.fields}
    if reasons == ["connection closed by peer"] and listed == {0}:
        # nccl-tests lists one rank: the connection is between the process's own threads
        # over loopback, so no peer exited; something on the host closed it.
        yield Found(
            message + ": nccl-tests runs one rank, so both ends are this process's own "
            "threads on one host: something on the host closes its local TCP connections "
            "(endpoint-security or web-filtering software, a firewall rule on lo)",
            failed,
            fix="Check the host's security software (endpoint protection's network or web "
            "filtering) and firewall rules for loopback traffic; exempt the job's processes "
            "or disable the filtering module, and rerun the single-GPU test.",
        )
        return
    if reasons == ["connection closed by peer"]:
        message += ": the peer process probably exited first; its first error is the cause"
    yield Found(message, failed)


@check(
    "rendezvous-unreachable",
    ERROR,
    "Ranks reach the c10d store (MASTER_ADDR:MASTER_PORT or the rendezvous endpoint)",
    "Every rank connects to the TCP store on rank 0's host before NCCL starts; if it cannot, "
    "the job never starts.",
    "Point MASTER_ADDR or --rdzv-endpoint at rank 0's pod (in a PyTorchJob the master "
    "Service), and let no firewall or NetworkPolicy block the port between pods.",
)
def store_unreachable(ctx: Context) -> Iterator[Found]:
    failed = ctx.of(ev.STORE_CONNECT)
    if not failed:
        return
    targets = sorted({f"{e.fields['host']}:{e.fields['port']}" for e in failed if e.fields["host"]})
    notes = []
    for target in targets:
        host = target.rsplit(":", 1)[0]
        why = unroutable_address(host)
        if why:
            notes.append(f"{host} is a {why} address, reachable only from its own host")
        elif host.startswith("172.17."):
            notes.append(f"{host} looks like a docker bridge address, not reachable from others")
    refused = [e for e in failed if "refused" in (e.fields.get("reason") or "").lower()]
    if refused and not notes:
        store_logged = any(e.rank == 0 for e in ctx.events if e.kind != ev.STORE_CONNECT)
        notes.append(
            "the host answered and refused the connection: nothing listens on that port, so the "
            "store never started there (rank 0's process failed or exited before listening, "
            "or listens on another port)"
            + ("" if store_logged else "; no line of rank 0 is in these logs: read its log")
        )
    where = f" at {', '.join(targets[:3])}" if targets else ""
    note = f" ({'; '.join(notes)})" if notes else ""
    yield Found(f"{who(failed)} could not reach the c10d store{where}{note}", failed)


@check(
    "rendezvous-unresolvable",
    ERROR,
    "The rendezvous host name resolves",
    "MASTER_ADDR (or the rendezvous endpoint) must resolve on every rank; a worker that starts "
    "before the master's name exists fails at once.",
    "In a PyTorchJob MASTER_ADDR is the master pod's Service (<job>-master-0), which exists "
    "only once the master pod is created: keep the operator's wait for it (or retry), and "
    "check the name and the cluster DNS.",
)
def store_unresolvable(ctx: Context) -> Iterator[Found]:
    failed = ctx.of(ev.UNRESOLVED)
    if failed:
        hosts = sorted({e.fields["host"] for e in failed if e.fields["host"]})
        name = f" {', '.join(hosts)}" if hosts else ""
        yield Found(
            f"the rendezvous host{name} does not resolve on {who(failed)} (name or service not "
            "known): the master's name is wrong or did not exist yet when the ranks started",
            failed,
        )


@check(
    "rendezvous-bind-failed",
    ERROR,
    "The c10d store can listen on its port",
    "Rank 0 listens on MASTER_PORT (or the rendezvous port); another process holding it stops "
    "the job before it starts.",
    "Give each run on a node its own port (MASTER_PORT or --rdzv-endpoint), make sure the "
    "program does not hard-code one, and end processes left from an earlier attempt.",
)
def store_bind(ctx: Context) -> Iterator[Found]:
    failed = ctx.of(ev.BIND)
    if failed:
        ports = sorted({e.fields["port"] for e in failed if e.fields["port"]})
        port = f" {', '.join(ports)}" if ports else ""
        yield Found(
            f"the c10d store could not listen on port{port}: address already in use (another "
            "run or a leftover process on the same host holds it)",
            failed,
        )


@check(
    "store-timeout",
    ERROR,
    "Every rank joins the c10d store and rendezvous",
    "Rank 0's store waits for every rank; ranks that never start (pending pods, a crashed "
    "worker) or cannot reach it leave the others waiting until the timeout.",
    "Check that every pod is running and reaches MASTER_ADDR:MASTER_PORT; gang scheduling "
    "(Kueue, Volcano minAvailable) keeps partial jobs from starting.",
)
def store_timeout(ctx: Context) -> Iterator[Found]:
    for event in ctx.of(ev.STORE_JOIN):
        f = event.fields
        yield Found(
            f"only {f['joined']} of {f['expected']} ranks joined the c10d store within "
            f"{f['seconds']}s: the others never started or could not reach it",
            [event],
        )
    rendezvous = ctx.of(ev.RENDEZVOUS)
    if rendezvous:
        errors = sorted({e.fields["error"] for e in rendezvous})
        yield Found(
            f"torchrun's rendezvous failed ({', '.join(errors)}): not every node joined in time",
            rendezvous,
        )


@check(
    "gloo-connect-failed",
    ERROR,
    "Gloo connects every pair of ranks",
    "Gloo binds the address the hostname resolves to (or GLOO_SOCKET_IFNAME); a wrong or "
    "unreachable interface fails its full-mesh connect.",
    "Set GLOO_SOCKET_IFNAME to the one interface that routes between the nodes and check "
    "that no firewall blocks TCP between them.",
)
def gloo_connect(ctx: Context) -> Iterator[Found]:
    if any(_gloo_loopback(ctx)):
        return  # unroutable-interface names the cause
    failed = ctx.of(ev.GLOO_CONNECT)
    if failed:
        remotes = sorted({e.fields["remote"] for e in failed if e.fields["remote"]})
        target = f" (to {', '.join(remotes[:3])})" if remotes else ""
        yield Found(
            f"Gloo on {who(failed)} could not connect its full mesh{target}: it bound an "
            "interface the other ranks cannot reach, or a firewall is in between",
            failed,
            fix=_ifname_fix(ctx, "GLOO_SOCKET_IFNAME"),
        )
