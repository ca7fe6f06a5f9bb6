#!/usr/bin/env bash
# Like Kafka's kafka-transactions.sh (same subcommands and options):
#   kafka-transactions.sh --bootstrap-server H:P list
#   kafka-transactions.sh --bootstrap-server H:P find-hanging --broker-id 1
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" transactions "$@"
