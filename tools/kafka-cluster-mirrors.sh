#!/usr/bin/env bash
# Like the cluster-mirroring proposal's kafka-cluster-mirrors.sh (same options and output):
#   kafka-cluster-mirrors.sh --bootstrap-server H:P --create --mirror M --mirror-config F
#   kafka-cluster-mirrors.sh --bootstrap-server H:P --stop --topics '.*' --mirror M
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
exec "${KCORE:-$here/.venv/bin/kcore}" cluster-mirrors "$@"
