#!/usr/bin/env bash
# Like Kafka's kafka-configs.sh (same options): kafka-configs.sh --bootstrap-server H:P --describe --topic T
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" configs "$@"
