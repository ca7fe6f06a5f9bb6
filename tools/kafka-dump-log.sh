#!/usr/bin/env bash
# Like Kafka's kafka-dump-log.sh (same options): kafka-dump-log.sh --files 00000000000000000000.log
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" dump-log "$@"
