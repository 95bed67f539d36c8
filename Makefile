# Every target installs what it needs first, so a fresh clone needs only the machine image.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TASKS_VENV := .venv-tasks

.PHONY: install dev stack down chat test lint typecheck clean help

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

dev: install  ## start the whole local stack and chat with the bot from this terminal
	$(PY) -m infra.dev

stack: install  ## start the whole local stack in the foreground (Ctrl-C stops it)
	$(PY) -m infra.stack up

down: $(VENV)/.installed  ## stop, by pid, anything a killed stack left running
	$(PY) -m infra.stack down

chat: $(VENV)/.installed  ## chat with a stack started by `make stack` in another terminal
	$(PY) -m infra.chat

lint: $(VENV)/.installed  ## ruff lint and format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.installed  ## mypy, strict
	$(VENV)/bin/mypy

test: install lint typecheck  ## install, lint, type-check, start the emulators and run every test
	$(PY) -m pytest

clean:  ## remove virtual environments and local stack state
	rm -rf $(VENV) $(TASKS_VENV) .local .pytest_cache .mypy_cache .ruff_cache
