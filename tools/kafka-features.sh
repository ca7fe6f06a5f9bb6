#!/usr/bin/env bash
# Like Kafka's kafka-features.sh (same options): kafka-features.sh --bootstrap-server H:P describe
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" features "$@"
