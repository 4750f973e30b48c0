# Two entry points (see README): `make quickstart` and `make test`.
# Both create .venv with everything the project needs, then run: the package with its dev,
# notebook (the notebook test runs it headless) and connect (the Spark Connect test) extras.
PY ?= python3
EXTRAS := dev,notebook,connect
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: quickstart test clients prometheus browser lint bench bench-spark clean protos FORCE

# The install is editable in setuptools' strict mode: the venv's site-packages holds a static
# path to a tree of links to the sources (build/__editable__.*), so the package `rmqlog`
# (folder store/) is a regular package on sys.path and a folder named like it in a user's
# working directory cannot shadow it (the default mode's import hook runs after such folders
# are found). Edits are live; an added or removed module needs a reinstall, hence SOURCES.
SOURCES := $(VENV)/.sources
MODULES := $(sort $(shell find store spark_rmq rmqnet -name '*.py' -o -name '*.c' -o -name py.typed) \
             $(wildcard rmqnet/console/templates/* rmqnet/console/static/*))

$(SOURCES): FORCE
	@mkdir -p $(VENV)
	@echo '$(MODULES)' | cmp -s - $@ || echo '$(MODULES)' > $@

$(STAMP): pyproject.toml setup.py store/_native.c $(SOURCES)
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip >/dev/null
	$(VENV)/bin/python -m pip install -e '.[$(EXTRAS)]' --config-settings editable_mode=strict
	touch $(STAMP)

FORCE:

# The real RocketMQ clients tests/wire drives (tests/wire/real_clients.py, docs/clients.md "Clients
# tested"): npm ali-ons from its committed package-lock.json (`npm ci`: exactly the locked tree,
# integrity-checked), and PyPI rocketmq (the C++ client) in an environment of its own, hash-pinned.
# Both need the registries the first time; `make test` depends on them, `make quickstart` does not.
# PyPI rocketmq-python-client (RocketMQ's official Python 5.x client, gRPC) in an environment of
# its own too (it installs a top-level module `rocketmq` as well), its whole tree hash-pinned.
NODE_CLIENTS := tests/wire/clients/node
NODE_STAMP := $(NODE_CLIENTS)/node_modules/.installed
# npm rocketmq-client-nodejs (RocketMQ's official Node.js 5.x client, gRPC), a locked tree of its own
NODE5_CLIENTS := tests/wire/clients/node5
NODE5_STAMP := $(NODE5_CLIENTS)/node_modules/.installed
ROCKETMQ_VENV := .venv-rocketmq
ROCKETMQ_STAMP := $(ROCKETMQ_VENV)/.installed
ROCKETMQ5_VENV := .venv-rocketmq5
ROCKETMQ5_STAMP := $(ROCKETMQ5_VENV)/.installed

$(NODE_STAMP): $(NODE_CLIENTS)/package.json $(NODE_CLIENTS)/package-lock.json
	cd $(NODE_CLIENTS) && npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

$(NODE5_STAMP): $(NODE5_CLIENTS)/package.json $(NODE5_CLIENTS)/package-lock.json
	cd $(NODE5_CLIENTS) && npm ci --no-audit --no-fund
	touch $(NODE5_STAMP)

$(ROCKETMQ_STAMP): tests/wire/clients/cpp/requirements.txt
	test -x $(ROCKETMQ_VENV)/bin/python || $(PY) -m venv $(ROCKETMQ_VENV)
	$(ROCKETMQ_VENV)/bin/python -m pip install -r tests/wire/clients/cpp/requirements.txt
	touch $(ROCKETMQ_STAMP)

$(ROCKETMQ5_STAMP): tests/wire/clients/python5/requirements.txt
	test -x $(ROCKETMQ5_VENV)/bin/python || $(PY) -m venv $(ROCKETMQ5_VENV)
	$(ROCKETMQ5_VENV)/bin/python -m pip install -r tests/wire/clients/python5/requirements.txt
	touch $(ROCKETMQ5_STAMP)

clients: $(NODE_STAMP) $(NODE5_STAMP) $(ROCKETMQ_STAMP) $(ROCKETMQ5_STAMP)

# the gRPC message modules (rmqnet/grpc/v2/) compiled again from proto/ (see proto/README.md)
protos: $(STAMP)
	$(VENV)/bin/python jobs/gen_grpc.py

# Debian's Prometheus, which tests/wire/test_prometheus.py runs against a broker (it fails, not
# skips, without it): installed from the distribution's packages as root (CI runs as root), the
# package's own service not used (the test starts its own on 127.0.0.1 and stops it by PID)
PROMETHEUS_BIN := /usr/bin/prometheus

$(PROMETHEUS_BIN):
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus

prometheus: $(PROMETHEUS_BIN)

# Debian's Chromium and its WebDriver, which tests/wire/test_console_browser.py drives headless
# through selenium (it fails, not skips, without them): the distribution's packages, as root
CHROMEDRIVER_BIN := /usr/bin/chromedriver

$(CHROMEDRIVER_BIN):
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium chromium-driver

browser: $(CHROMEDRIVER_BIN)

quickstart: $(STAMP)
	$(VENV)/bin/python jobs/quickstart.py

# two workers (pytest-xdist): the tests that use the shared SparkSession form one group
# (tests/conftest.py), so one worker runs them all with one JVM while the other runs the rest
test: $(STAMP) clients prometheus browser
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadgroup

# ruff's formatter and its line length (pyproject.toml): a module's 600-line cap is met by
# splitting it, never by long lines
lint: $(STAMP)
	$(VENV)/bin/ruff format --check store spark_rmq rmqnet jobs tests refcodec setup.py
	$(VENV)/bin/ruff check store spark_rmq rmqnet jobs tests refcodec setup.py
	$(VENV)/bin/mypy -p rmqlog -p spark_rmq -p rmqnet

bench: $(STAMP)
	$(VENV)/bin/python jobs/bench_store.py
	$(VENV)/bin/python jobs/bench_durability.py

bench-spark: $(STAMP)
	$(VENV)/bin/python jobs/bench_spark.py

clean:
	rm -rf $(VENV) build *.egg-info $(ROCKETMQ_VENV) $(ROCKETMQ5_VENV) $(NODE_CLIENTS)/node_modules $(NODE5_CLIENTS)/node_modules
