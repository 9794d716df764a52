# Composer — every task a developer or CI runs. `make help` lists them.
# Bootstraps its own tooling: installs uv with pip when it is missing and never
# downloads a Python (the machine's python3, 3.11 or newer, is used).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(PYTHON)
UV := $(PYTHON) -m uv
VENV_STAMP := .venv/.synced
PY_SOURCES := libs services tests examples tools
TS_SDK := sdks/typescript
COMPOSER_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/composer

.PHONY: help install bytecode sandbox-tools run demo simulate test pytest test-unit lint fmt proto proto-breaking proto-release ts-sdk test-ts docs ui bench chaos migrate clean images test-containers

help:  ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# What .venv is made from. A checkout or a pull that gives one of them a new time but the
# same content (.venv/.inputs keeps their digest) rebuilds nothing: uv would rebuild every
# workspace package whose pyproject.toml is newer, about 12 s (issue 31).
VENV_INPUTS := pyproject.toml uv.lock $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)
$(VENV_STAMP): $(VENV_INPUTS)
	@digest=$$(sha256sum $(VENV_INPUTS) | sha256sum | cut -c1-64); \
	if [ -x .venv/bin/python ] && [ "$$digest" = "$$(cat .venv/.inputs 2>/dev/null)" ]; then \
		touch $@; exit 0; \
	fi; \
	$(UV) --version >/dev/null 2>&1 || { echo "installing uv with pip"; $(PYTHON) -m pip install --quiet uv; }; \
	echo "$(UV) sync --locked --all-packages"; \
	$(UV) sync --locked --all-packages && echo "$$digest" > .venv/.inputs && touch $@

# Bytecode, compiled once: with PYTHONDONTWRITEBYTECODE set (as on this project's machines)
# nothing writes it at import, so every service compiled every module it imports at each
# start, seven processes at once (issue 31: most of a warm `make run`). The installed
# libraries are compiled after each sync; the workspace's sources (a few hundred files,
# ~0.2 s when none changed) before each start that imports them.
BYTECODE_STAMP := .venv/.compiled
$(BYTECODE_STAMP): $(VENV_STAMP)
	@echo "compiling the installed libraries' bytecode (once per sync)"
	@.venv/bin/python -m compileall -q -j0 .venv/lib >/dev/null 2>&1 || true
	@touch $@

bytecode: $(BYTECODE_STAMP)
	@.venv/bin/python -m compileall -q -j0 libs services >/dev/null

install: $(VENV_STAMP) bytecode  ## create .venv with every library and the dev tools (bytecode compiled)

# PYTHON nodes run in a bubblewrap sandbox, networked by slirp4netns (docs/architecture.md
# §8.1). Installed with apt-get when missing and allowed; else the workers refuse PYTHON nodes
# (saying why) until they are, and everything else runs. The tests need them too.
sandbox-tools:
	@missing=""; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v slirp4netns >/dev/null 2>&1 || missing="$$missing slirp4netns"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing (the PYTHON nodes' sandbox)"; \
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } \
				|| echo "could not install$$missing: PYTHON nodes will be refused until it is" >&2; \
		else \
			echo "PYTHON nodes run sandboxed by bubblewrap and slirp4netns; install them" \
				"(sudo apt-get install$$missing), or the workers refuse PYTHON nodes" >&2; \
		fi; \
	fi

# No `uv run` in between: the stack watches make itself (--parent-pid), so killing make,
# even with SIGKILL, stops every service. COMPOSER_PORT_BASE moves its ports (README).
run: $(VENV_STAMP) bytecode sandbox-tools  ## the whole stack on this machine, supervised (Ctrl-C stops it); tokens in .state/tokens.env; REPLICAS="coordinator=2 timer=2"
	exec .venv/bin/python -m composer_devstack --parent-pid $$PPID$(if $(REPLICAS), --replicas "$(REPLICAS)")

# The CLI itself, not `uv run composer`: uv's own start would cost more than the command.
CLI := .venv/bin/composer
# The API token: COMPOSER_API_TOKEN if set, else the one `make run` made (.state/tokens.env);
# the API: COMPOSER_API_URL if set, else where `make run` listens (.state/stack.env), else 8080.
demo: $(VENV_STAMP)  ## with `make run` going in another terminal: apply examples/, run hello, price-check and order-fulfilment-lines to the end
	@token=$${COMPOSER_API_TOKEN:-$$(sed -n 's/^COMPOSER_API_TOKEN=//p' .state/tokens.env 2>/dev/null)}; \
	if [ -z "$$token" ]; then \
		echo "no API token: start 'make run' first (it makes .state/tokens.env), or set COMPOSER_API_TOKEN" >&2; exit 1; \
	fi; \
	export COMPOSER_API_TOKEN=$$token; \
	api=$${COMPOSER_API_URL:-$$(sed -n 's/^COMPOSER_API_URL=//p' .state/stack.env 2>/dev/null)}; \
	export COMPOSER_API_URL=$${api:=http://127.0.0.1:8080}; \
	$(CLI) apply -f examples/hello.yaml -f examples/payment.yaml -f examples/price-check.yaml -f examples/order-fulfilment.yaml \
		-f examples/fulfil-line.yaml -f examples/order-fulfilment-lines.yaml --deploy && \
	$(CLI) start hello --input "{\"url\": \"$$api/healthz\", \"name\": \"$${USER:-you}\"}" --wait && \
	$(CLI) start price-check --input "{\"url\": \"$$api/examples/shop/items/7\"}" --wait && \
	$(CLI) start order-fulfilment-lines --input @examples/order-fulfilment-lines.input.json --wait

simulate: $(VENV_STAMP)  ## drive examples/order-fulfilment.yaml through the state machine in memory
	$(UV) run --no-sync python examples/simulate.py examples/order-fulfilment.yaml

# `make test` is what CI runs (.ci/run): the linters first, so a lint error fails it.
test: lint test-ts pytest  ## the linters, then the whole suite (unit; the TypeScript SDK's; integration and both SDKs' conformance against the real PostgreSQL and Redis)

pytest: $(VENV_STAMP) bytecode sandbox-tools ts-sdk  ## the whole suite without the linters (quick iteration; PYTEST_ARGS="-k lease -x")
	$(UV) run --no-sync pytest $(PYTEST_ARGS)

test-unit: $(VENV_STAMP) sandbox-tools $(TS_SDK)/node_modules/.installed  ## the unit suite only (no services needed)
	$(UV) run --no-sync pytest tests/unit

lint: $(VENV_STAMP) proto-breaking  ## ruff (lint and format check), mypy, and buf breaking on proto/
	$(UV) run --no-sync ruff check $(PY_SOURCES)
	$(UV) run --no-sync ruff format --check $(PY_SOURCES)
	$(UV) run --no-sync mypy

fmt: $(VENV_STAMP)  ## format and auto-fix
	$(UV) run --no-sync ruff format $(PY_SOURCES)
	$(UV) run --no-sync ruff check --fix $(PY_SOURCES)

proto: $(VENV_STAMP)  ## regenerate the gRPC code in libs/rpc from proto/
	$(UV) run --no-sync python libs/rpc/generate.py

# The TypeScript worker SDK and the npm tools (buf): npm ci when package-lock.json changed,
# then buf generates the protocol's code from proto/ and tsc builds it (a few seconds).
$(TS_SDK)/node_modules/.installed: $(TS_SDK)/package-lock.json
	cd $(TS_SDK) && npm ci --no-audit --no-fund
	@touch $@

ts-sdk: $(TS_SDK)/node_modules/.installed  ## build the TypeScript worker SDK (sdks/typescript; npm, pinned by package-lock.json)
	cd $(TS_SDK) && npm run --silent build

# Fails when proto/ breaks the released protocol (proto/releases/v1.json): worker.proto, "Versions".
test-ts: ts-sdk  ## the TypeScript worker SDK's unit tests (node --test)
	cd $(TS_SDK) && npm test --silent

proto-breaking: $(TS_SDK)/node_modules/.installed  ## buf breaking: proto/ against the last release's protocol
	cd $(TS_SDK) && npx --no-install buf breaking ../../proto --against ../../proto/releases/v1.json

# At a release: the protocol as released becomes what proto-breaking checks against.
proto-release: $(TS_SDK)/node_modules/.installed  ## renew proto/releases/v1.json, the released protocol's buf image
	cd $(TS_SDK) && npx --no-install buf build ../../proto --exclude-source-info -o ../../proto/releases/v1.json
	$(PYTHON) -c 'import json, sys; p = sys.argv[1]; d = json.load(open(p)); open(p, "w").write(json.dumps(d, indent=1, sort_keys=True) + "\n")' proto/releases/v1.json

# A unit test (tests/unit/test_reference_docs.py) fails when a page is out of date.
docs: $(VENV_STAMP)  ## regenerate docs/nodes.md and docs/configuration.md from the models and settings
	$(UV) run --no-sync python -m tools.refdocs

ui:  ## rebuild the web UI into the api-gateway package (npm, pinned by package-lock.json); commit it
	cd services/api_gateway/ui && npm ci --no-audit --no-fund && npm run build

migrate: $(VENV_STAMP)  ## create the database if missing and apply migrations/ to COMPOSER_DATABASE_URL
	$(UV) run --no-sync python -m composer_repo migrate --url "$(COMPOSER_DATABASE_URL)"

BENCH ?= stack
bench: $(VENV_STAMP)  ## the stack benchmark (never part of make test); BENCH="core repo" or BENCH_ARGS="--only w1 --scale 0.1"
	$(UV) run --no-sync python -m tests.bench $(BENCH) $(BENCH_ARGS)

chaos: $(VENV_STAMP)  ## faults under load, checked against a ledger (not in make test; CHAOS_ARGS="--runs 2000 --concurrency 60")
	$(UV) run --no-sync python -m tests.chaos $(CHAOS_ARGS)

# The images are tagged with the workspace's version; IMAGE_BASE=upstream|local|auto (deploy/build-images.sh).
IMAGE_TAG ?= $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -1)
images:  ## build every service's image with docker or podman, tagged with the version (local base without Docker Hub)
	IMAGE_TAG=$(IMAGE_TAG) deploy/build-images.sh

test-containers: $(VENV_STAMP) images  ## build the images, run the stack in containers (podman) and drive runs through it
	IMAGE_TAG=$(IMAGE_TAG) COMPOSER_TEST_UV="$$(command -v $(PYTHON)) -m uv" \
		$(UV) run --no-sync pytest tests/containers --exitfirst $(PYTEST_ARGS)

clean:  ## remove the virtualenv and caches
	rm -rf .venv .mypy_cache .ruff_cache .pytest_cache .hypothesis
