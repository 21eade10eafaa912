# mapsvc: `make run` brings the whole service up, `make test` runs the whole suite.
VENV ?= .venv
PYTHON ?= $(shell command -v python3.11 || command -v python3)
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup services run test lint fmt clean protos bench bench-hosts stress fair-share web screenshots docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP) web

# the web pages (api/web: the viewer, the API docs) into api/web/dist: npm ci and the build,
# each skipped when its inputs are unchanged (deploy/web.sh keeps their hash)
web:
	bash deploy/web.sh

services:
	bash deploy/services.sh

# the gRPC stubs of protos/ (committed; tests/convert/test_stubs.py fails when they are stale)
protos: setup
	$(BIN)/python -m shared.convert.protos

run: setup services
	$(BIN)/mapsvc demo-data
	$(BIN)/mapsvc up

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	cd api/web && node_modules/.bin/eslint . && node_modules/.bin/prettier --check .
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: setup
	bash deploy/services.sh --test-tools
	$(MAKE) lint
	$(BIN)/pytest $(PYTEST_ARGS)

# benchmarks against the peers named in the issues (scripts, not timed tests)
# every goal line of the run is gathered in $(BENCH_SUMMARY) and printed at the end
BENCH_SUMMARY := $(CURDIR)/$(VENV)/bench-summary.txt
bench: setup
	bash deploy/services.sh --test-tools
	rm -f $(BENCH_SUMMARY)
	export MAPSVC_BENCH_SUMMARY=$(BENCH_SUMMARY) && \
	$(BIN)/python -m tests.bench.bench_raster && \
	$(BIN)/python -m tests.bench.bench_tiles && \
	$(BIN)/python -m tests.bench.bench_render && \
	$(BIN)/python -m tests.bench.bench_wms && \
	$(BIN)/python -m tests.bench.bench_seed && \
	$(BIN)/python -m tests.bench.bench_priority --contrast && \
	$(BIN)/python -m tests.bench.bench_vector && \
	$(BIN)/python -m tests.bench.bench_watch && \
	$(BIN)/python -m tests.bench.bench_front && \
	$(BIN)/python -m tests.bench.bench_ogc && \
	$(BIN)/python -m tests.bench.bench_zooms && \
	$(BIN)/python -m tests.bench.bench_zooms --size 50000 --only after --tiles 8 && \
	$(BIN)/python -m tests.bench.bench_hosts
	@echo; echo "=== make bench: every goal, this run, this machine ($$(nproc) CPUs) ==="
	@cat $(BENCH_SUMMARY)

# pre-tiling by workers on two hosts (network namespaces, as root) against one host
bench-hosts: setup
	bash deploy/services.sh --test-tools
	$(BIN)/python -m tests.bench.bench_hosts $(BENCH_ARGS)

# the service under hostile load (wrk, SSE streams, slow readers): probes answer in 5 s, no 500
stress: setup
	bash deploy/services.sh --test-tools
	$(BIN)/python -m tests.bench.stress $(STRESS_ARGS)

# one caller flooding each class of route (documents, tiles, filtered items, jobs, providers,
# auth) with wrk, the service at its default quotas: another caller's p99 within 2 x its idle p99
fair-share: setup
	bash deploy/services.sh --test-tools
	$(BIN)/python -m tests.bench.fair_share $(FAIR_SHARE_ARGS)

# the screenshots of the viewer in docs/images, taken by its browser tests, and the image of
# what metatiles change in a labelled style (docs/images/metatile-difference.png)
screenshots: setup
	bash deploy/services.sh --test-tools
	MAPSVC_SCREENSHOTS=$(CURDIR)/docs/images $(BIN)/pytest -p no:cacheprovider tests/browser/test_viewer.py \
		tests/shared/tiles/test_metatile.py

# the documentation (docs/, mkdocs.yml) at http://$(DOCS_ADDR)/, rebuilt as you edit it
DOCS_ADDR ?= 127.0.0.1:8002
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr $(DOCS_ADDR)

fmt: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache api/web/node_modules api/web/dist
