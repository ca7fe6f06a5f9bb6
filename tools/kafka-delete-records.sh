#!/usr/bin/env bash
# Like Kafka's kafka-delete-records.sh (same options): kafka-delete-records.sh --bootstrap-server H:P --offset-json-file offsets.json
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" delete-records "$@"
