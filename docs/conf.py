"""Sphinx configuration of the rewardnorm_jax documentation.

Build (warnings are errors): ``sphinx-build -W --keep-going -b html docs docs/_build/html``;
the pages' examples run each alone under ``pytest tests/pages/test_doc_examples.py``;
screenshot every page and check that none is wider than the window: ``python docs/screenshots.py``;
check that no code block scrolls sideways at 1280 px (``nox -s docs`` does):
``python docs/check_code_width.py docs/_build/html``.
"""

import importlib
import inspect
import os
import sys

from sphinx.ext.autodoc.mock import mock
from sphinx.util import logging
from sphinx.util.inspect import stringify_signature

logger = logging.getLogger(__name__)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)  # document the working tree, installed or not

project = "rewardnorm_jax"
author = "rewardnorm_jax contributors"
copyright = "rewardnorm_jax contributors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_nb",  # Markdown pages (MyST) and notebooks
    "sphinx_copybutton",
    "sphinx_design",  # tab sets
]

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
root_doc = "index"

# Notebooks are rendered from their stored outputs; the test suite executes them.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
# The Brax, Jumanji, JaxMARL and Tunix adapters are documented without their frameworks installed.
autodoc_mock_imports = ["brax", "jumanji", "jaxmarl", "mujoco_playground", "tunix"]
autodoc_typehints = "description"
# Types for the documented arguments only: a class's fields are documented once, as attributes.
autodoc_typehints_description_target = "documented"
autodoc_default_options = {
    "members": True,
    "exclude-members": "replace",  # flax.struct's generated copy-with-changes method
}
autosummary_generate = False  # the tables link to the entries on the same page
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields: NamedTuple fields are documented once


def skip_field_aliases(app, what, name, obj, skip, options):
    """Leaves out a NamedTuple's generated field entries ("Alias for field number 0")."""
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def init_signature(app, what, name, obj, options, signature, return_annotation):
    """The arguments of ``__init__`` for a class on a mocked base (Brax's, Jumanji's ``Wrapper``).

    The mock's ``__new__`` would give every such class the signature ``(*args, **kwargs)``.
    """
    if what != "class" or signature != "(*args, **kwargs)":
        return None
    parameters = list(inspect.signature(obj.__init__).parameters.values())[1:]  # no self
    init = inspect.Signature(parameters)
    return stringify_signature(init, show_annotation=False), return_annotation


# Each public module, and the modules besides its own under which api.md documents its exports
# (the gymnax, Brax, Jumanji and JaxMARL adapters share their state functions).
PUBLIC_MODULES = {
    "rewardnorm_jax": (),
    "rewardnorm_jax.gymnax": (),
    "rewardnorm_jax.gymnasium": (),
    "rewardnorm_jax.gymnasium.vector": (),
    "rewardnorm_jax.brax": ("rewardnorm_jax.gymnax",),
    "rewardnorm_jax.jumanji": ("rewardnorm_jax.gymnax",),
    "rewardnorm_jax.jaxmarl": ("rewardnorm_jax.gymnax",),
    "rewardnorm_jax.tunix": (),
}


def check_api_complete(app, env):
    """Warns (an error under -W) for every export of a public module that api.md leaves out."""
    documented = env.get_domain("py").objects
    with mock(app.config.autodoc_mock_imports):
        for name, also in PUBLIC_MODULES.items():
            for export in importlib.import_module(name).__all__:
                if not any(f"{module}.{export}" in documented for module in (name, *also)):
                    logger.warning("%s.%s is exported but missing from docs/api.md", name, export)


def setup(app):
    """Connects the hooks above."""
    app.connect("autodoc-skip-member", skip_field_aliases)
    app.connect("autodoc-process-signature", init_signature)
    app.connect("env-check-consistency", check_api_complete)


# sphinx.ext.doctest gives the pages' testcode, testoutput and doctest blocks; they run each
# alone under tests/pages/test_doc_examples.py, the docstrings' examples under --doctest-modules.
doctest_test_doctest_blocks = ""

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_js_files = ["table-code.js"]
html_title = "rewardnorm_jax"
html_theme_options = {
    "show_toc_level": 2,
    "navbar_persistent": [],  # no page-wide header: the sidebar has the search field
}

# Display equations wider than the content column break into lines (MathJax 4).
mathjax4_config = {"output": {"displayOverflow": "linebreak"}}

# The copy button leaves out the prompts and the output of the examples.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
