# The two commands of the README: `make demo` and `make test`. Both set the project up first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help setup demo test lint sanity unit lab molecule bench build clean

help:
	@echo "make demo   set up, start the lab fleet, run preflight over it, print the fleet table and the commands to try next"
	@echo "           on the lab, left up for them (tests/lab/fleet down, or make test, stops it; DEMO_KEEP_LAB=0 stops it at the end)"
	@echo "make test   set up, then lint, sanity, unit, playbook, lab and molecule tests (what CI runs)"
	@echo "make unit   the unit and hostile-input tests (no Ansible run, no lab)"
	@echo "make lab    the playbook and lab tests (real ansible-playbook runs; the lab fleet needs root)"
	@echo "make setup | lint | sanity | molecule | bench | build | clean"

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

test: setup
	@bash scripts/test.sh

lint: setup
	@bash scripts/test.sh lint

sanity: setup
	@bash scripts/test.sh sanity

unit: setup
	@bash scripts/test.sh unit

lab: setup
	@bash scripts/test.sh lab lab2 lab3 lab_checks

molecule: setup
	@bash scripts/test.sh molecule

bench: setup
	@bash scripts/bench.sh

build: setup
	@mkdir -p build && .venv/bin/ansible-galaxy collection build --force --output-path build .

clean:
	@if [ -x tests/lab/fleet ]; then tests/lab/fleet down || true; fi
	rm -rf build .cache reports tests/output
