#!/usr/bin/env bash
# Like Kafka's kafka-storage.sh: kafka-storage.sh format -t <cluster id> -c server.properties
#                                 kafka-storage.sh random-uuid
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
kcore="${KCORE:-$here/.venv/bin/kcore}"
case "${1:-}" in
  random-uuid) exec "$kcore" random-uuid ;;
  format) shift; exec "$kcore" format "$@" ;;
  *) echo "usage: kafka-storage.sh format -t CLUSTER_ID -c server.properties | random-uuid" >&2; exit 2 ;;
esac
