# pg-status developer commands.  Everything runs from a venv in .venv that
# these targets create and fill; PostgreSQL server binaries come from the
# system.  Debian packages are installed, as root and only when missing, by
# .ci/system-deps (what `make run` needs) and .ci/test-deps (what only the
# tests use), both through .ci/apt-install: no service is started, no
# PostgreSQL cluster made, a held dpkg lock waited for.

PYTHON ?= python3
VENV   ?= .venv
PYTEST_ARGS ?=
PY     := $(VENV)/bin/python
# the venv with pg-status alone (what `make run` needs), then with the
# test and docs extras (everything else)
RUN_STAMP := $(VENV)/.installed-run
STAMP  := $(VENV)/.installed
# The daemon as `pip install .` installs it (no extras: no treq, no
# pyOpenSSL): what `make bench` and `make soak` run and measure.
DAEMON_VENV ?= .venv-daemon
DAEMON_STAMP := $(DAEMON_VENV)/.installed

.PHONY: venv run test dist deb version test-fast lint typecheck bench bench-hosts bench-fresh bench-hostile bench-rate bench-follow bench-quota bench-iterations soak docs docs-samples news news-check rules clean

# A venv without a working pip (what a first try leaves when python3-venv was
# missing) is made again from scratch.
$(RUN_STAMP): setup.py pyproject.toml
	PYTHON=$(PYTHON) bash .ci/system-deps
	$(PY) -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet .
	touch $(RUN_STAMP)

$(STAMP): setup.py pyproject.toml $(RUN_STAMP)
	$(PY) -m pip install --quiet '.[test,docs]'
	touch $(STAMP)

venv: $(STAMP)

$(DAEMON_STAMP): setup.py pyproject.toml $(STAMP) $(shell find pgstatus twisted -name '*.py')
	$(DAEMON_VENV)/bin/python -m pip --version >/dev/null 2>&1 \
		|| { rm -rf $(DAEMON_VENV) && $(PYTHON) -m venv $(DAEMON_VENV); }
	$(DAEMON_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(DAEMON_VENV)/bin/python -m pip install --quiet .
	touch $(DAEMON_STAMP)

## Start a local primary + two streaming replicas and pg-status against them.
## Installs only what that needs (.ci/system-deps, and pg-status alone in the
## venv): no test-only package (HAProxy, PgBouncer, ...), no service started.
run: $(RUN_STAMP)
	PYTHONPATH=$(CURDIR) $(PY) tests/run_local.py

## The whole test suite, real PostgreSQL included (never skipped), and the
## container tests (Docker image, Compose demo) when a Docker engine exists or
## can be started (see tests/dockerengine.py; in CI they fail without one).
## PYTEST_ARGS adds pytest arguments, e.g. PYTEST_ARGS="-m 'not docker'".
## Type-checked first (see typecheck).  The Debian packages only the tests
## use are installed first if missing (.ci/test-deps: openssl, systemd-analyze,
## HAProxy, PgBouncer; .ci/patroni-deps: etcd-server, as the Patroni tests run
## their own etcd), their services neither started nor enabled.
test: $(STAMP)
	bash .ci/test-deps
	bash .ci/patroni-deps
	$(VENV)/bin/mypy pgstatus
	PYTHONPATH=$(CURDIR) $(PY) -m pytest -q -p no:randomly $(PYTEST_ARGS)

## The wheel and the sdist in $(DIST) (python -m build: the sdist, then the
## wheel from it), checked with twine.  tests/deploy/test_dist.py installs
## the wheel into a new venv and runs it.
DIST ?= dist
dist: $(STAMP)
	rm -f $(DIST)/pg_status-$(shell packaging/version)*
	$(PY) -m build --outdir $(DIST) .
	$(VENV)/bin/twine check --strict $(DIST)/pg_status-$(shell packaging/version)*

## The Debian package in $(DIST): pg-status_<version>_<arch>.deb, with the
## service in a venv of Debian's python3.11 in /usr/lib/pg-status, its
## systemd unit, init script and /etc/default/pg-status; lintian errors fail
## it (packaging/build-deb.sh; its build dependencies from .ci/deb-deps).
deb:
	bash .ci/deb-deps
	DIST=$(DIST) packaging/build-deb.sh

## The version (pgstatus/__init__.py): of the wheel, the .deb and the image tag.
version:
	@packaging/version

## Only the tests that need no PostgreSQL server.
test-fast: $(STAMP)
	bash .ci/test-deps
	PYTHONPATH=$(CURDIR) $(PY) -m pytest -q -m 'not pg'

## The Prometheus alert rules: promtool check and unit tests (promtool from
## Debian's prometheus package: .ci/prometheus-deps installs it).
rules:
	bash .ci/prometheus-deps
	promtool check rules deploy/prometheus/pg-status.rules.yml
	cd deploy/prometheus && promtool test rules pg-status.rules.test.yml

lint: $(STAMP)
	$(VENV)/bin/ruff check pgstatus twisted tests bench

## mypy on the package (settings in pyproject.toml, [tool.mypy]).
typecheck: $(STAMP)
	$(VENV)/bin/mypy pgstatus

## The documentation (Sphinx, MyST Markdown) in docs/_build/html; warnings
## are errors.  tests/docs/ builds it the same way as part of `make test`.
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W -q -b html docs docs/_build/html

## The API reference's sample requests and answers (docs/reference/api-samples.json),
## from a real pg-status against a local primary and two replicas; after an
## API change (tests/docs/test_api_samples.py fails until then).
docs-samples: $(STAMP)
	PYTHONPATH=$(CURDIR) $(PY) tests/docs/api_samples.py --write

## NEWS.md from the fragments in newsfragments/ (VERSION=x.y.z, default the
## package's version: packaging/version); removes them.
news: VERSION ?= $(shell packaging/version)
news: $(STAMP)
	$(VENV)/bin/towncrier build --yes --version $(VERSION)

## A branch adds a news fragment (towncrier check against main).
news-check: $(STAMP)
	$(VENV)/bin/towncrier check --compare-with $${NEWS_BASE:-main}

## Load benchmark (not part of `make test`); needs wrk and taskset.
bench: $(STAMP) $(DAEMON_STAMP)
	bash .ci/bench-deps
	PYTHONPATH=$(CURDIR) $(PY) bench/run_bench.py --twistd $(DAEMON_VENV)/bin/twistd

## Soak (not part of `make test`): 10 minutes of checked mixed HTTP load while a
## replica flaps and the master fails over; RSS, fds and PostgreSQL sessions.
## SOAK_ARGS adds arguments, e.g. SOAK_ARGS=--launcher (the pg-status command).
soak: $(STAMP) $(DAEMON_STAMP)
	bash .ci/bench-deps
	PYTHONPATH=$(CURDIR) $(PY) bench/soak.py --twistd $(DAEMON_VENV)/bin/twistd $(SOAK_ARGS)

## RSS with 1, 10 and 100 configured hosts, and the slope per host; then
## CPU per check and /live latency with 100, 300 and 1,000 hosts that refuse
## connections (no PostgreSQL needed for that part).
bench-hosts: $(STAMP) $(DAEMON_STAMP)
	PYTHONPATH=$(CURDIR) $(PY) bench/hosts_rss.py --twistd $(DAEMON_VENV)/bin/twistd --malloc
	PYTHONPATH=$(CURDIR) $(PY) bench/hosts_refused.py --twistd $(DAEMON_VENV)/bin/twistd

## Fresh read-your-writes: replica share with and without wait_ms.
bench-fresh: $(STAMP)
	PYTHONPATH=$(CURDIR) $(PY) bench/fresh_ryow.py

## Checks of one host that a client looping on /follow/check or on min_lsn
## far ahead with wait_ms=1 can cause (HOSTILE_ARGS=--root DIR: another tree).
bench-hostile: $(STAMP)
	PYTHONPATH=$(CURDIR) $(PY) bench/hostile_checks.py $(HOSTILE_ARGS)

## Latency at a fixed 10,000 requests/s.
bench-rate: $(STAMP)
	bash .ci/bench-deps
	PYTHONPATH=$(CURDIR) $(PY) bench/fixed_rate.py

## Follower mode: one hub, 200 followers (sessions, hub CPU, role-change delay,
## fast-path cost, fallback when the hub is killed).
bench-follow: $(STAMP)
	bash .ci/bench-deps
	PYTHONPATH=$(CURDIR) $(PY) bench/followers.py

## Under a CPU quota (cgroup v1, 0.1 and 0.25 vCPU): latency at fixed rates,
## throttled periods, CPU per request, time to /ready.  Needs root.  QUOTA_ARGS
## adds arguments, e.g. QUOTA_ARGS=--image (the Docker image too).
bench-quota: $(STAMP) $(DAEMON_STAMP)
	PYTHONPATH=$(CURDIR) $(PY) bench/quota.py --twistd $(DAEMON_VENV)/bin/twistd $(QUOTA_ARGS)

## The longest stretch of CPU between two waits for I/O, without HTTP load
## (3 hosts, then 51).
bench-iterations: $(STAMP) $(DAEMON_STAMP)
	PYTHONPATH=$(CURDIR) $(DAEMON_VENV)/bin/python bench/iterations.py
	PYTHONPATH=$(CURDIR) $(DAEMON_VENV)/bin/python bench/iterations.py --repeat 17

clean:
	rm -rf docs/_build $(VENV) .venv-newest $(DAEMON_VENV) build dist *.egg-info bench-results .pytest_cache .hypothesis
