#!/usr/bin/env bash
# Like Kafka's kafka-server-start.sh: kafka-server-start.sh [server.properties] [--override k=v ...]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
kcore="${KCORE:-$here/.venv/bin/kcore}"
args=()
if [[ $# -gt 0 && "$1" != --* ]]; then args+=(--config "$1"); shift; fi
exec "$kcore" server "${args[@]}" "$@"
