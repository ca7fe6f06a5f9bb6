#!/usr/bin/env bash
# Like Kafka's kafka-leader-election.sh (same options): kafka-leader-election.sh --bootstrap-server H:P --election-type PREFERRED --all-topic-partitions
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" leader-election "$@"
