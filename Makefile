# Two entry points (see README): `make quickstart` and `make test`.
# Both create .venv with everything the project needs, then run: the package with its dev,
# notebook (the notebook test runs it headless) and connect (the Spark Connect test) extras.
PY ?= python3
EXTRAS := dev,notebook,connect
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: quickstart test lint bench bench-spark clean

$(STAMP): pyproject.toml setup.py store/_native.c
	$(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --upgrade pip >/dev/null
	$(VENV)/bin/python -m pip install -e '.[$(EXTRAS)]'
	touch $(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/python jobs/quickstart.py

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check store spark_rmq jobs tests
	$(VENV)/bin/mypy store spark_rmq

bench: $(STAMP)
	$(VENV)/bin/python jobs/bench_store.py
	$(VENV)/bin/python jobs/bench_durability.py

bench-spark: $(STAMP)
	$(VENV)/bin/python jobs/bench_spark.py

clean:
	rm -rf $(VENV) build *.egg-info
