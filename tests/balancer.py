"""The shipped load balancer configuration (``deploy/nginx.conf``) run on loopback in front of
given server processes: the tests and ``bench/cluster.py`` exercise the very file that
``docker-compose.yml`` uses, with only its upstream addresses and listen port replaced."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.servers import ROOT, free_port, wait_healthy

SHIPPED = ROOT / "deploy" / "nginx.conf"


def nginx_binary() -> Path | None:
    """nginx on this machine (Debian installs it outside a normal user's PATH), or None."""
    found = Path(shutil.which("nginx") or "/usr/sbin/nginx")
    return found if found.exists() else None


def configured(upstreams: list[str], port: int) -> str:
    """The shipped configuration with ``upstreams`` (``host:port`` each) in place of its
    replicas, listening on 127.0.0.1:``port``: each replica line of the shipped file (the
    primaries, then the backups), with its options, becomes one line per upstream."""
    conf = SHIPPED.read_text()
    first = re.compile(r"    server opensession-1:4096([^;]*);\n")
    assert first.search(conf), "deploy/nginx.conf no longer names its replicas as the tests expect"
    conf = re.sub(r"    server opensession-(?!1:)\d+:4096[^;]*;\n", "", conf)  # one line of each kind stays
    conf = first.sub(lambda m: "".join(f"    server {address}{m.group(1)};\n" for address in upstreams), conf)
    return conf.replace("listen 4096;", f"listen 127.0.0.1:{port};")


@dataclass(frozen=True)
class Balancer:
    url: str
    pid: int  # nginx's master process (its worker is a child)


@contextmanager
def shipped_nginx(nginx: Path, upstreams: list[str], directory: Path) -> Iterator[Balancer]:
    """nginx with the shipped configuration in front of ``upstreams``, its files in
    ``directory``; yields it once it answers a health check, stops it on exit."""
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nginx.conf").write_text(configured(upstreams, port))
    globals_ = f"daemon off; pid {directory}/nginx.pid; error_log {directory}/error.log;"
    proc = subprocess.Popen(
        [str(nginx), "-p", str(directory), "-c", str(directory / "nginx.conf"), "-g", globals_],
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, gone=lambda: proc.poll() is not None)
        yield Balancer(url, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
