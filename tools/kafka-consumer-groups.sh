#!/usr/bin/env bash
# Like Kafka's kafka-consumer-groups.sh (same options):
#   kafka-consumer-groups.sh --bootstrap-server H:P --describe --group G
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" consumer-groups "$@"
