#!/usr/bin/env bash
# Like Kafka's kafka-reassign-partitions.sh (same options): kafka-reassign-partitions.sh --bootstrap-server H:P --execute --reassignment-json-file plan.json
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" reassign-partitions "$@"
