"""The sockets a process tree listens on, read from /proc (Linux; no psutil needed): for the tests that every
server and cluster the project starts binds loopback only (issue 45).

    listening(pid)       [(pid, 'tcp' | 'tcp6' | 'udp' | 'udp6', address, port)] of pid and its descendants:
                         TCP sockets in LISTEN, UDP sockets bound to a port
    non_loopback(rows)   the rows whose address is not loopback (127.0.0.0/8, ::1, ::ffff:127.x)
"""
from __future__ import annotations

import ipaddress
import os
from pathlib import Path

__all__ = ["descendants", "listening", "non_loopback"]

TCP_LISTEN = "0A"
UDP_UNCONNECTED = "07"


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (by parent id, from /proc/*/stat)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return out


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
    return inodes


def _address(hex_addr: str) -> str:
    """/proc/net's address (little-endian 32-bit words) as text."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _table(pid: int, kind: str) -> dict[str, tuple[str, int]]:
    """inode -> (address, port) of the sockets of /proc/<pid>/net/<kind> in the listening state."""
    state = TCP_LISTEN if kind.startswith("tcp") else UDP_UNCONNECTED
    out = {}
    try:
        lines = Path(f"/proc/{pid}/net/{kind}").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        f = line.split()
        if len(f) > 9 and f[3] == state:
            addr, port = f[1].split(":")
            out[f[9]] = (_address(addr), int(port, 16))
    return out


def listening(pid: int) -> list[tuple[int, str, str, int]]:
    """(pid, kind, address, port) of every listening socket of ``pid`` and its descendants."""
    rows = []
    for p in descendants(pid):
        inodes = _socket_inodes(p)
        if not inodes:
            continue
        for kind in ("tcp", "tcp6", "udp", "udp6"):
            for inode, (addr, port) in _table(p, kind).items():
                if inode in inodes:
                    rows.append((p, kind, addr, port))
    return rows


def non_loopback(rows) -> list:
    def loop(a: str) -> bool:
        ip = ipaddress.ip_address(a)
        mapped = getattr(ip, "ipv4_mapped", None)
        return (mapped or ip).is_loopback
    return [r for r in rows if not loop(r[2])]
