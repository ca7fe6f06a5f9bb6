#!/usr/bin/env bash
# Like Kafka's kafka-acls.sh (same options): kafka-acls.sh --bootstrap-server H:P --list --topic T
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" acls "$@"
