#!/usr/bin/env bash
# Like Kafka's kafka-get-offsets.sh (same options): kafka-get-offsets.sh --bootstrap-server H:P --topic T --time -1
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" get-offsets "$@"
