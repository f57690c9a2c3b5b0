"""Sphinx configuration of gpumat's documentation site.

Build it from the repository root (README.md, "Documentation"):

    python -m sphinx -W -c docs/site . build/site

The source directory is the repository root, so the pages are the repository's own files, rendered
where they are: README.md, docs/*.md, benchmarks/README.md and the notebooks examples/*.ipynb
(``include_patterns`` below); their relative links between each other resolve as on GitHub.
docs/site/ adds only the front page, the API reference (generated at build time from the
docstrings by ``gpumat_site.py``) and this file.

Why Sphinx + MyST-NB + Furo: autodoc imports gpumat, so it documents the compiled Cython type
(``PyGpuMatrix``) as well as the Python modules, and with ``nitpicky`` every cross-reference to a
gpumat name must resolve; MyST reads the markdown guides unchanged and MyST-NB executes and renders
the notebooks (through nbclient) in the same build; Furo is a maintained, readable theme with no
external assets.

Strictness (with ``-W`` every warning fails the build): a broken cross-reference or link, a public
name without a docstring, a notebook cell that raises, a page outside the navigation, and (checked
after the build) a link in the HTML to a missing file or anchor, or a page that loads anything from
outside the site.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The installed gpumat is documented, never the source tree's (it has no compiled _core):
# `python -m` puts the working directory, the repository root, first on sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
sys.path.insert(0, str(HERE))
try:
    import gpumat  # noqa: F401
except ImportError as exc:
    raise RuntimeError(
        f"the site documents the installed gpumat: pip install '.[docs]' ({exc})"
    ) from exc

# The notebooks' settings for the site: small enough that the whole build takes a few minutes on
# two cores, on the cpu device (explicit settings in the environment win).
for _var, _value in {
    "GPUMAT_NOTEBOOK_DEVICE": "cpu",
    "GPUMAT_NOTEBOOK_EPOCHS": "3",
    "GPUMAT_NOTEBOOK_TRAIN_SIZE": "20000",
    "GPUMAT_NOTEBOOK_QUICK": "1",
    "GPUMAT_NOTEBOOK_PLOT": str(ROOT / "build" / "mnist_mlp.png"),  # not into examples/
}.items():
    os.environ.setdefault(_var, _value)
# The emulator's thread schedule: a fixed seed, so the rendered pages are reproducible.
os.environ.setdefault("GPUMAT_EMU_SEED", "1")

project = "gpumat"
author = "the gpumat authors"
copyright = "the gpumat authors, MIT license"

extensions = [
    "myst_nb",  # markdown (MyST) and notebooks, executed with nbclient
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the docstrings' "Args:", "Returns:", "Raises:" sections
    "gpumat_site",  # the generated API pages, the docstring check, the offline link check
]

root_doc = "docs/site/index"
include_patterns = [
    "README.md",
    "docs/*.md",
    "docs/site/**",
    "benchmarks/README.md",
    "benchmarks/results/README.md",
    "benchmarks/results/gpu_check/README.md",
    "benchmarks/sgemm/NOTES.md",
    "examples/*.ipynb",
]
exclude_patterns = ["build", "**/.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}

# Every cross-reference must resolve. Names outside gpumat (numpy, the standard library, builtins in
# type hints) have no inventory offline: only those are let through.
nitpicky = True
# Private names (``_Rewriter`` in a type hint) are not documented either.
nitpick_ignore_regex = [(r"py:.*", r"(?!gpumat\b).*"), (r"py:.*", r"gpumat(\.\w+)*\._\w+")]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as a field list (NamedTuple fields are documented once)

myst_heading_anchors = 4  # GitHub's heading anchors (docs link to "file.md#some-heading")
myst_enable_extensions = ["colon_fence"]

# Notebooks: executed in every build, in their own folder, with this interpreter; a cell that raises
# fails the build. `-D nb_execution_mode=off` builds without running them (pages without outputs).
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
nb_kernel_rgx_aliases = {".*": "gpumat-site-python"}  # gpumat_site.py: this interpreter's kernel

html_theme = "furo"
html_title = "gpumat"
html_static_path = []
html_extra_path = ["_extra"]  # index.html at the site's root: a redirect to the front page
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
