"""deploy/kubernetes.yaml: its probes, sent as the kubelet sends them (HTTP GET, no credentials),
to a real server with a password: ready once started and while the database answers; alive
while the server answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml

from app.settings import Settings
from tests.servers import ROOT, free_port, thread_server


def _documents() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()))


def _container() -> dict[str, Any]:
    documents = _documents()
    assert [d["kind"] for d in documents] == ["Deployment", "PersistentVolumeClaim", "Service"]
    deployment = documents[0]
    assert deployment["spec"]["replicas"] > 1
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_the_probes_pass_on_a_serving_replica_behind_a_password(
    tmp_path: Path, project_dir: Path, config_dir: Path
) -> None:
    container = _container()
    names = {e["name"] for e in container["env"]}
    assert {"OPENSESSION_ADVERTISE_URL", "OPENSESSION_DB", "OPENCODE_SERVER_PASSWORD"} <= names
    port = free_port()
    settings = Settings(
        db=str(tmp_path / "k8s.db"),
        directory=str(project_dir),
        config_dir=str(config_dir),
        port=port,
        OPENSESSION_PASSWORD="pw",  # type: ignore[call-arg]  # read under its environment names only
    )
    with thread_server(settings) as server:
        assert httpx.get(f"{server.url}/session").status_code == 401  # the password is on
        for probe in ("readinessProbe", "livenessProbe"):
            get = container[probe]["httpGet"]
            assert get["port"] == 4096 == Settings.model_fields["port"].default, probe
            answer = httpx.get(f"{server.url}{get['path']}")  # no credentials, as the kubelet sends it
            assert answer.status_code == 200, (probe, answer.text)


def test_a_stopping_replica_finishes_within_its_grace_period() -> None:
    """The kubelet waits out preStop, then sends SIGTERM, and kills the pod at the end of the
    grace period: the pause and the server's graceful time must both fit in it, with room for
    the hand-off and the exit."""
    pod = _documents()[0]["spec"]["template"]["spec"]
    container = _container()
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep", command
    pause = float(command[1])
    env = {e["name"]: e.get("value") for e in container["env"]}
    graceful = float(env["OPENSESSION_GRACEFUL_SECONDS"])
    assert pause > 0
    assert pause + graceful + 5 <= pod["terminationGracePeriodSeconds"], (pause, graceful)


def _image_environment() -> dict[str, str]:
    """The variables the Dockerfile sets for every container of the image."""
    lines = [line.removeprefix("ENV ") for line in (ROOT / "Dockerfile").read_text().splitlines()]
    return dict(line.split("=", 1) for line in lines if "=" in line and " " not in line)


def test_every_replica_has_the_same_data_directory_on_a_volume_that_outlives_it() -> None:
    """The data directory holds the worktrees, and the global configuration is in it: on a
    volume every replica mounts (the one of the project in Kubernetes, a named one in compose),
    any replica serves a worktree's sessions, a worktree outlives the container that made it, and
    a change to the global configuration through one replica is every replica's."""
    image = _image_environment()
    data_dir = image["OPENSESSION_DATA_DIR"]
    assert image["OPENSESSION_CONFIG_DIR"].startswith(data_dir + "/")
    overridden = {e["name"] for e in _container()["env"]} & {"OPENSESSION_DATA_DIR", "OPENSESSION_CONFIG_DIR"}
    assert not overridden  # the image's hold
    mounts = {m["mountPath"]: m for m in _container()["volumeMounts"]}
    data, workspace = mounts[data_dir], mounts["/workspace"]
    assert data["name"] == workspace["name"] and data["subPath"] != workspace["subPath"]
    deployment, *others = _documents()
    [volume] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == data["name"]]
    claim_name = volume["persistentVolumeClaim"]["claimName"]
    [claim] = [d for d in others if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == claim_name]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    replicas = [s for name, s in compose["services"].items() if name.startswith("opensession-")]
    assert len(replicas) > 1
    data_volumes = {v.partition(":")[0] for r in replicas for v in r["volumes"] if v.endswith(f":{data_dir}")}
    assert len(data_volumes) == 1 and data_volumes <= set(compose["volumes"]), data_volumes  # one named volume
