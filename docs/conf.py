"""Sphinx configuration of the rewardnorm_jax documentation.

Build (warnings are errors): ``sphinx-build -W --keep-going -b html docs docs/_build/html``;
run the pages' examples: ``sphinx-build -W --keep-going -b doctest docs docs/_build/doctest``.
"""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)  # document the working tree, installed or not

project = "rewardnorm_jax"
author = "rewardnorm_jax contributors"
copyright = "rewardnorm_jax contributors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_nb",  # Markdown pages (MyST) and notebooks
]

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
root_doc = "index"

# Notebooks are rendered from their stored outputs; the test suite executes them.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
# The Brax and Jumanji adapters are documented without their frameworks installed.
autodoc_mock_imports = ["brax", "jumanji", "mujoco_playground"]
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields: NamedTuple fields are documented once

# The examples on the pages run in one namespace per page, under the doctest builder.
doctest_test_doctest_blocks = ""  # docstrings' examples run under pytest --doctest-modules
doctest_global_setup = """
import jax
import jax.numpy as jnp
import numpy as np
import rewardnorm_jax as rn
"""

html_theme = "alabaster"
html_static_path = ["_static"]
html_title = "rewardnorm_jax"
