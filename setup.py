"""
Packaging for pg-status.

The version has one source, ``pgstatus.__version__``, read here without
importing the package (its dependencies may not be installed yet).
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(
    r'^__version__ = "([^"]+)"',
    (HERE / "pgstatus" / "__init__.py").read_text(),
    re.M,
).group(1)

setup(
    name="pg-status",
    version=VERSION,
    description="Sidecar that reports PostgreSQL master, replicas and replica lag over HTTP",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.11",
    packages=[*find_packages(include=["pgstatus", "pgstatus.*"]), "twisted.plugins"],
    package_data={"twisted": ["plugins/pgstatus_plugin.py"]},
    install_requires=[
        "twisted>=24.3,<27",
        "txpostgres>=1.7,<2",
        "psycopg2>=2.9,<3",
        "klein>=23.5,<25",
    ],
    extras_require={
        # pgstatus.client: the application-side client.  treq pulls in
        # pyOpenSSL (through Twisted's tls extra), which the daemon never
        # uses, so the daemon's install goes without it.
        "client": [
            "treq>=23.11,<27",
        ],
        # pg_status__patroni_etcd: Patroni's leader key read from etcd's v3
        # JSON gateway (treq, and pyOpenSSL for https endpoints)
        "patroni": [
            "treq>=23.11,<27",
        ],
        # pg_status__http_listen=ssl:...: TLS for the API
        "tls": [
            "twisted[tls]>=24.3,<27",
        ],
        "test": [
            "treq>=23.11,<27",
            "pytest>=8,<10",
            "pytest-twisted>=1.14,<2",
            "testcontainers>=4,<5",
            "hypothesis>=6.100,<7",
            "openapi-spec-validator>=0.7,<1",
            "jsonschema>=4.18,<5",
            "prometheus-client>=0.17,<1",
            # tests/deploy: the Kubernetes manifests and the Prometheus
            # configuration (kubernetes-validate bundles the API schemas)
            "pyyaml>=6,<7",
            "kubernetes-validate>=1.29,<2",  # the 1.29 schemas
            # tests/deploy/test_podmonitor.py: the Prometheus Operator's
            # PodMonitor and PrometheusRule, as models generated from its CRDs
            "cloudcoil.models.prometheus_operator>=0.80,<1",
            "ruff>=0.5",
            # `make typecheck`, the first step of `make test`; mypy-zope
            # supports a narrow range of mypy versions
            "mypy>=2.4,<2.5",
            "mypy-zope>=1.0.17,<2",
            "types-psycopg2>=2.9,<3",
            # `make dist` and tests/deploy/test_dist.py: the wheel and the
            # sdist, and their check
            "build>=1.2,<2",
            "twine>=5,<8",
            # tests/ha: a real HA manager beside pg-status (etcd itself is
            # Debian's etcd-server, .ci/patroni-deps)
            "patroni[etcd3]>=4,<5",
        ],
        # `make docs` (Sphinx, MyST Markdown) and the changelog (towncrier)
        "docs": [
            "sphinx>=7.2,<9",
            "myst-parser>=2,<5",
            "towncrier>=23.10,<26",
        ],
    },
    entry_points={
        # `twistd --nodaemon --pidfile= [options] pgstatus`, or with --daemon
        # `twistd [options] pgstatus` (pgstatus/launch.py)
        "console_scripts": ["pg-status = pgstatus.launch:main"],
    },
    classifiers=[
        "Framework :: Twisted",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.13",
        "Topic :: Database",
    ],
)
