#!/usr/bin/env bash
# Like Kafka's kafka-metadata-quorum.sh (same options): kafka-metadata-quorum.sh --bootstrap-server H:P describe --status
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" metadata-quorum "$@"
