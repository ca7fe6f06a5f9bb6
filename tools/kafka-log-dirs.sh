#!/usr/bin/env bash
# Like Kafka's kafka-log-dirs.sh (same options): kafka-log-dirs.sh --bootstrap-server H:P --describe --topic-list T
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" log-dirs "$@"
