#!/usr/bin/env bash
# Like Kafka's kafka-topics.sh (same options): kafka-topics.sh --bootstrap-server H:P --list
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" topics "$@"
