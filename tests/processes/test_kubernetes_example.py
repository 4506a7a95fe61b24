"""deploy/kubernetes.yaml: its probes, run as the kubelet runs them, against a real server with a
password (ready while the database answers; alive while the server does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from app.settings import Settings
from tests.servers import ROOT, free_port, thread_server


def _container() -> dict:
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()))
    assert [d["kind"] for d in documents] == ["Deployment", "PersistentVolumeClaim", "Service"]
    deployment = documents[0]
    assert deployment["spec"]["replicas"] > 1
    return deployment["spec"]["template"]["spec"]["containers"][0]


def _probe(command: list[str], port: int, password: str) -> int:
    assert command[0] == "python"
    script = command[2].replace("127.0.0.1:4096", f"127.0.0.1:{port}")
    env = {**os.environ, "OPENCODE_SERVER_PASSWORD": password}
    run = subprocess.run([sys.executable, "-c", script, *command[3:]], env=env, capture_output=True, timeout=30)
    return run.returncode


def test_the_probes_pass_on_a_serving_replica_and_need_the_password(
    tmp_path: Path, project_dir: Path, config_dir: Path
) -> None:
    container = _container()
    names = {e["name"] for e in container["env"]}
    assert {"OPENSESSION_ADVERTISE_URL", "OPENSESSION_DB", "OPENCODE_SERVER_PASSWORD"} <= names
    settings = Settings(
        db=str(tmp_path / "k8s.db"),
        directory=str(project_dir),
        config_dir=str(config_dir),
        port=free_port(),
        OPENSESSION_PASSWORD="pw",  # type: ignore[call-arg]  # read under its environment names only
    )
    with thread_server(settings) as server:
        port = int(server.url.rsplit(":", 1)[1])
        for probe in ("readinessProbe", "livenessProbe"):
            command = container[probe]["exec"]["command"]
            assert _probe(command, port, "pw") == 0, probe
            assert _probe(command, port, "wrong") != 0, probe
