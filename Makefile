# Every target installs what it needs first, so a fresh clone needs only the machine image.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TASKS_VENV := .venv-tasks

.PHONY: install dev stack down chat sweep admin stop usage console chromium screenshot test test-ready test-fast test-stack test-browser lint typecheck clean help

help:  ## list the targets
	@grep -E '^[a-z.-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

$(TASKS_VENV)/.installed: infra/tasks_emulator/requirements.txt
	$(PYTHON) -m venv $(TASKS_VENV)
	$(TASKS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(TASKS_VENV)/bin/python -m pip install --quiet -r infra/tasks_emulator/requirements.txt
	touch $@

install: $(VENV)/.installed $(TASKS_VENV)/.installed  ## create both virtual environments

.venv-tasks: $(TASKS_VENV)/.installed

dev: install  ## start the whole local stack, print the workspace's URL, and chat with the bot from this terminal
	$(PY) -m infra.dev

stack: install  ## start the whole local stack as make dev does, in the foreground, and print the workspace's URL (Ctrl-C stops it)
	$(PY) -m infra.stack up

down: $(VENV)/.installed  ## stop, by pid, anything a killed stack left running
	$(PY) -m infra.stack down

chat: $(VENV)/.installed  ## chat with a stack started by `make stack` in another terminal
	$(PY) -m infra.chat

sweep: $(VENV)/.installed  ## run the daily sweep now on the running local stack (NOW=2030-01-01T00:00:00+00:00 moves its clock)
	$(PY) -m ops.admin sweep $(if $(NOW),--now $(NOW))

admin: $(VENV)/.installed  ## list open questions, pending approvals and stuck sessions (local stack, or GOOGLE_CLOUD_PROJECT with ADC)
	$(PY) -m ops.admin list

stop: $(VENV)/.installed  ## stop a session and every session it delegated to (SESSION=<id>; make admin lists ids)
	$(PY) -m ops.admin stop $(SESSION)

usage: $(VENV)/.installed  ## tokens and estimated cost per session, user and channel for a day (DAY=YYYY-MM-DD, default today)
	$(PY) -m ops.admin usage $(if $(DAY),--day $(DAY))

console: $(VENV)/.installed  ## the operator console, read-only, on a project's Firestore (GOOGLE_CLOUD_PROJECT, FIRESTORE_DATABASE, your ADC; PORT=8090)
	$(PY) -m ops.console $(if $(PORT),--port $(PORT))

# The browser tests drive Debian's chromium (Playwright's own browser download is not used).
chromium:  ## install Debian's chromium for the browser tests when it is missing (apt-get, as root or with sudo)
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "chromium is missing: installing Debian's chromium for the browser tests (apt-get install -y chromium)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; else SUDO=none; fi; \
	  { [ "$$SUDO" != none ] && { $$SUDO apt-get install -y chromium || { $$SUDO apt-get update && $$SUDO apt-get install -y chromium; }; }; } \
	  || { echo "Cannot install chromium (it needs root, sudo, or apt): run 'apt-get install chromium' as root. The browser tests (tests/browser/) need /usr/bin/chromium."; exit 1; }; }

screenshot: install chromium  ## regenerate docs/workspace.png and docs/console.png, the README's pictures (a real demo run)
	@# Without a colour emoji font Chromium draws the page's emoji as empty boxes.
	@test -e /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf || { \
	  echo "installing Debian's fonts-noto-color-emoji for the pictures' emoji (apt-get)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get install -y fonts-noto-color-emoji || { $$SUDO apt-get update && $$SUDO apt-get install -y fonts-noto-color-emoji; }; }
	$(PY) -m infra.screenshot

lint: $(VENV)/.installed  ## ruff lint and format check, and the import layers of shared/ (import-linter)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(VENV)/.installed  ## mypy, strict
	$(VENV)/bin/mypy

# pytest-xdist workers for make test and make test-stack (TEST_WORKERS=0 runs the suite in one process): each worker
# starts a stack of its own and runs whole test modules (tests/scheduling.py), so the stack tests' waits overlap.
TEST_WORKERS ?= 2
PYTEST_WORKERS := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadscope)

test:  ## install, lint, type-check, start the emulators and run every test
	@# The three environments install at once, then lint, type-check and the deploy checks run at once.
	$(MAKE) --jobs=3 --output-sync=target test-ready
	$(PY) -m pytest $(PYTEST_WORKERS)

test-ready: install deploy-install chromium lint typecheck deploy-check  ## what make test checks and installs before pytest

test-fast: $(VENV)/.installed  ## the fast tier only (tests/fast): pure logic, and the handlers in-process on the Firestore emulator
	$(PY) -m pytest tests/fast

test-stack: install  ## the stack tier only (tests/stack): the functions, emulators and fakes as real processes
	$(PY) -m pytest $(PYTEST_WORKERS) tests/stack

test-browser: install chromium  ## the browser tier only (tests/browser): the workspace page in headless Chromium
	$(PY) -m pytest tests/browser

clean:  ## remove virtual environments (.venv-deploy too), build/ and local stack state
	rm -rf $(VENV) $(TASKS_VENV) $(DEPLOY_VENV) build .local .pytest_cache .mypy_cache .ruff_cache

# ---- Deploy (README "Deploy"): the source zip, the offline Terraform checks, apply, the Slack manifest ----
DEPLOY_VENV := .venv-deploy
TF := terraform -chdir=terraform

.PHONY: deploy-install deploy-check deploy-test package apply slack-manifest restart destroy

# checkov and the provider schema clash with .venv's pins, so they get their own environment. --no-compile: the
# provider package is 1,800 generated modules of which only its schema file is read, so byte-compiling them at
# install time took minutes; checkov compiles what it imports when it first runs.
$(DEPLOY_VENV)/.installed: requirements-deploy.txt
	$(PYTHON) -m venv $(DEPLOY_VENV)
	echo '*' > $(DEPLOY_VENV)/.gitignore
	$(DEPLOY_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DEPLOY_VENV)/bin/python -m pip install --quiet --no-compile -r requirements-deploy.txt
	touch $@

deploy-install: $(VENV)/.installed $(DEPLOY_VENV)/.installed  ## install the deploy checks' tools (.venv-deploy)

deploy-check: deploy-install  ## offline deploy checks: terraform fmt, checkov, mypy of deploy/ (make test also runs tests/deploy)
	@command -v terraform >/dev/null || { echo "terraform is not installed: https://developer.hashicorp.com/terraform/install"; exit 1; }
	$(TF) fmt -check -diff -recursive
	$(DEPLOY_VENV)/bin/checkov --config-file terraform/.checkov.yaml
	$(VENV)/bin/mypy deploy tests/deploy

deploy-test: deploy-install  ## the deploy tier only (tests/deploy): the Terraform against the code and the provider schema, the zip served from a fresh venv
	$(PY) -m pytest tests/deploy

package: $(VENV)/.installed  ## build build/function-source.zip, the source every function deploys from
	$(PY) -m deploy.package

apply: package  ## build the zip, then terraform init and apply (needs terraform/terraform.tfvars and gcloud auth)
	$(TF) init
	$(TF) apply

slack-manifest: $(VENV)/.installed  ## write build/slack-manifest.yaml with the deployed URLs (OUTPUTS=saved.json skips terraform; SLACK_SURFACE=assistant for the assistant pane)
	@mkdir -p build
	$(if $(OUTPUTS),,$(TF) output -json > build/terraform-outputs.json)
	$(PY) -m deploy.manifest --outputs $(or $(OUTPUTS),build/terraform-outputs.json) --out build/slack-manifest.yaml --surface $(or $(SLACK_SURFACE),agent)

restart: $(VENV)/.installed  ## start a new revision of every function, so instances re-read their secrets
	$(PY) -m deploy.restart

destroy:  ## terraform destroy (first set firestore.deletion_protection = false and apply)
	$(TF) destroy

# ---- Benchmarks (BENCHMARKS.md): slack-bolt, the peer the ingress is measured against, is benchmark-only ----
.PHONY: bench bench-compare

$(VENV)/.bench-installed: $(VENV)/.installed bench/requirements.txt
	$(PY) -m pip install --quiet -r bench/requirements.txt
	touch $@

bench: install $(VENV)/.bench-installed  ## run the benchmarks on a stack of their own; writes BENCHMARKS.md and bench/results.json
	$(PY) -m bench.run

bench-compare: install  ## each figure of bench/results.json at REV (default: round 2's run) and now, side by side; rewrites that section of BENCHMARKS.md
	$(PY) -m bench.compare $(REV) --write

# ---- Fault injection (README "Fault injection"): flows on a stack of their own while faults are injected ----
.PHONY: faults

faults: install  ## inject faults into a mix of flows on a stack of its own; prints the counts, writes faults/results.json and BENCHMARKS.md (SEED=N replays a run)
	$(PY) -m faults $(if $(SEED),--seed $(SEED))
