#!/usr/bin/env bash
# Like Kafka's kafka-console-consumer.sh (same options):
#   kafka-console-consumer.sh --bootstrap-server H:P --topic T
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" console-consumer "$@"
