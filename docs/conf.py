"""
Sphinx configuration of the pg-status documentation (MyST Markdown).

Built by ``make docs`` as ``sphinx-build -W -b html docs docs/_build/html``;
``tests/docs/`` builds it the same way.  The configuration and API
reference pages are generated from the code by ``docs/_ext/pgstatus_docs.py``.
"""

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]

from pgstatus import __version__  # noqa: E402

project = "pg-status"
author = "pg-status contributors"
copyright = "2026, pg-status contributors"
version = release = __version__

extensions = ["myst_parser", "pgstatus_docs"]
myst_enable_extensions = ["deflist"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
# a link to a variable or page that does not exist fails the -W build
nitpicky = True
# values and names are shown as the code writes them
smartquotes = False

html_theme = "alabaster"
html_title = f"pg-status {version}"
