"""The site's own Sphinx extension: the API reference, the docstring check, the offline link check.

- API reference: one page per public module of gpumat (every module whose dotted name has no part
  starting with ``_``), written into ``docs/site/api/`` when the build starts (the folder is
  generated, not kept in git). A module's page renders its docstring, then every name it defines
  and exports (``__all__``, else its public names) with autodoc; names it re-exports are listed with
  a cross-reference to the page that documents them, so with ``nitpicky`` a re-export whose target
  is not documented fails the build.
- Docstring check: a public name (a function, class, constant, or a public method or property of a
  public class) without a docstring is a warning, so ``-W`` fails the build.
- Link check, when the HTML is written, offline: every ``href``/``src`` of every page that stays in
  the site must name a file that exists and, with ``#anchor``, an id in that page; pages may link
  out (``https://``) but load nothing from outside (scripts, styles, images, frames).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import re
import sys
import types
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from sphinx.errors import ExtensionError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging

logger = logging.getLogger(__name__)

API_DIR = Path(__file__).resolve().parent / "api"
KERNEL_NAME = "gpumat-site-python"

# The reference's sections, bottom up like docs/ARCHITECTURE.md: a module goes to the first
# section with a matching prefix (a new module lands in "More modules" until it is placed).
SECTIONS = [
    ("The package", ["gpumat"]),
    (
        "Arrays, devices, interop",
        ["gpumat.devices", "gpumat.arrays", "gpumat.dlpack", "gpumat.checkpoint"],
    ),
    ("Kernels", ["gpumat.ops", "gpumat.reference"]),
    ("Graphs and autodiff", ["gpumat.graph"]),
    ("The runtime", ["gpumat.runtime"]),
    (
        "The PyTorch-style front end",
        [
            "gpumat.tensor",
            "gpumat.creation",
            "gpumat.dtypes",
            "gpumat.random",
            "gpumat.autograd",
            "gpumat.nn",
            "gpumat.compiler",
            "gpumat.data",
            "gpumat.serialization",
        ],
    ),
    (
        "Training",
        [
            "gpumat.optim",
            "gpumat.train",
            "gpumat.models",
            "gpumat.datasets",
            "gpumat.distributed",
        ],
    ),
    (
        "The dlsys course's names",
        ["gpumat.autodiff", "gpumat.gpu_op", "gpumat.ndarray", "gpumat.dlsys"],
    ),
]


# ---- which names a module documents ---------------------------------------------------------


def public_modules() -> list[str]:
    """Every importable public module of gpumat, in a stable order."""
    import gpumat

    names = ["gpumat"]
    for info in pkgutil.walk_packages(gpumat.__path__, "gpumat."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names, key=lambda n: (n != "gpumat", n))


def exported(module) -> list[str]:
    """A module's public names: ``__all__``, else every name without a leading underscore that is
    not a module."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)
        ]
    return list(names)


def assigned_names(module) -> set[str]:
    """The names a module's source binds at top level by assignment, def or class."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= {t.id for t in ast.walk(target) if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def kind(obj) -> str:
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if callable(obj) and hasattr(obj, "__qualname__"):
        return "function"
    return "data"


class Catalogue:
    """Where each public name is documented: its own module's page, or, for an object defined in
    a private module (``gpumat._core``), the first public module that exports it."""

    def __init__(self, modules: list[str]):
        self.modules = {name: importlib.import_module(name) for name in modules}
        self.home: dict[int, str] = {}  # id(object) -> the dotted name it is documented under
        self.own: dict[str, list[str]] = {name: [] for name in modules}
        # Pass 1: what a public module defines (functions and classes whose __module__ it is,
        # constants it assigns). Pass 2: objects of private modules (gpumat._core) and constants
        # assigned nowhere public, documented in the first public module that exports them.
        for second_pass in (False, True):
            for name, module in self.modules.items():
                bound = assigned_names(module)
                for attr in exported(module):
                    obj = getattr(module, attr)
                    if kind(obj) == "module" or (attr.startswith("__") and attr.endswith("__")):
                        continue
                    if not second_pass:
                        is_own = attr in bound if kind(obj) == "data" else obj.__module__ == name
                    else:
                        is_own = id(obj) not in self.home and (
                            kind(obj) == "data" or obj.__module__.startswith("gpumat._")
                        )
                    if is_own and attr not in self.own[name]:
                        self.own[name].append(attr)
                        self.home.setdefault(id(obj), f"{name}.{attr}")
        for name, module in self.modules.items():  # in the order of __all__
            order = exported(module)
            self.own[name].sort(key=order.index)

    def target(self, module: str, attr: str) -> str | None:
        """The documented dotted name of ``module.attr`` (None: documented nowhere)."""
        obj = getattr(self.modules[module], attr)
        if attr.startswith("__") and attr.endswith("__"):
            return None
        if kind(obj) == "module":
            return obj.__name__
        if attr in self.own[module]:
            return f"{module}.{attr}"
        if id(obj) in self.home:
            return self.home[id(obj)]
        qual = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', attr)}"
        return qual if qual.split(".")[0] == "gpumat" else None


def instance_of_documented_class(obj) -> bool:
    """An object of a public gpumat class with a docstring (the graph API's op singletons such as
    ``softmax_op = SoftmaxOp()``): autodoc renders the class's docstring for it."""
    cls = type(obj)
    return (
        cls.__module__.split(".")[0] == "gpumat"
        and not cls.__name__.startswith("_")
        and _has_doc(cls)
    )


# ---- the docstring check --------------------------------------------------------------------


def _has_doc(obj) -> bool:
    doc = inspect.getdoc(obj)
    return bool(doc and doc.strip())


def undocumented(catalogue: Catalogue) -> list[str]:
    """The public names, and public members of public classes, that have no docstring."""
    missing = []
    for name, module in catalogue.modules.items():
        if not _has_doc(module):
            missing.append(f"module {name}")
        try:
            attr_docs = ModuleAnalyzer.for_module(name).find_attr_docs()
        except Exception:  # a compiled module: no source to read doc comments from
            attr_docs = {}
        for attr in catalogue.own[name]:
            obj = getattr(module, attr)
            if kind(obj) == "data":
                if instance_of_documented_class(obj):
                    continue  # an op object: autodoc shows its class's docstring
                if ("", attr) not in attr_docs:
                    missing.append(f"{name}.{attr} (a constant: give it a #: doc comment)")
                continue
            if not _has_doc(obj) or (
                kind(obj) != "function" and inspect.getdoc(obj) == inspect.getdoc(type(obj))
            ):
                missing.append(f"{name}.{attr}")
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    if member.startswith("_") or not (
                        callable(value) or isinstance(value, property) or hasattr(value, "__get__")
                    ):
                        continue
                    if isinstance(value, types.MemberDescriptorType):
                        continue  # a __slots__ field: the class docstring describes it
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                    if not _has_doc(value):
                        missing.append(f"{name}.{attr}.{member}")
    return missing


# ---- the generated pages --------------------------------------------------------------------


def module_page(catalogue: Catalogue, name: str) -> str:
    module = catalogue.modules[name]
    lines = [f"# `{name}`", "", "```{eval-rst}", f".. automodule:: {name}", "   :no-members:", ""]
    for attr in catalogue.own[name]:
        obj = getattr(module, attr)
        k = kind(obj)
        directive = {
            "class": "autoclass",
            "exception": "autoexception",
            "function": "autofunction",
            "data": "autodata",
        }[k]
        lines.append(f".. {directive}:: {name}.{attr}")
        if k in ("class", "exception"):
            lines.append("   :members:")
            lines.append("   :show-inheritance:")
        lines.append("")
    lines.append("```")
    others = [a for a in exported(module) if a not in catalogue.own[name]]
    if others:
        lines += ["", "## Names documented elsewhere", ""]
        lines += ["This module also exports these names, documented where they are defined:", ""]
        for attr in others:
            target = catalogue.target(name, attr)
            if target is None and attr.startswith("__"):
                continue  # __version__: the module docstring says what it is
            if target is None:
                raise ExtensionError(f"{name}.{attr}: documented nowhere (a public name)")
            role = "mod" if kind(getattr(module, attr)) == "module" else "obj"
            lines.append(f"- `{attr}`: {{py:{role}}}`{target}`")
    return "\n".join(lines) + "\n"


def section_of(name: str) -> str:
    for title, prefixes in SECTIONS:
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return title
    return "More modules"


def index_page(modules: list[str]) -> str:
    lines = [
        "# API reference",
        "",
        "Every public module of gpumat, generated from the docstrings when the site is built.",
        "The guides in prose are [The Python API](../../api.md) and the pages beside it; how the",
        "layers fit together: [the architecture](../../ARCHITECTURE.md).",
        "",
    ]
    order = [t for t, _ in SECTIONS] + ["More modules"]
    for title in order:
        members = [m for m in modules if section_of(m) == title]
        if not members:
            continue
        lines += ["```{toctree}", f":caption: {title}", ":maxdepth: 1", ""]
        lines += [m for m in members]
        lines += ["```", ""]
    return "\n".join(lines)


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def generate_api(app) -> None:
    modules = public_modules()
    catalogue = Catalogue(modules)
    app.gpumat_catalogue = catalogue
    API_DIR.mkdir(exist_ok=True)
    wanted = {"index.md": index_page(modules)}
    wanted.update({f"{m}.md": module_page(catalogue, m) for m in modules})
    for stale in API_DIR.glob("*.md"):
        if stale.name not in wanted:
            stale.unlink()
    for filename, text in wanted.items():
        _write_if_changed(API_DIR / filename, text)
    for name in undocumented(catalogue):
        logger.warning(f"public name without a docstring: {name}", type="gpumat", subtype="docs")


# ---- rendering the docstrings --------------------------------------------------------------

# gpumat's docstrings are plain text with reStructuredText's inline markup (``code``, :func:`x`);
# they use no substitutions (|name|) and no hyperlink references (name_), so the ``|`` of
# mean(|x|) and the trailing underscore of the labels y_ are text: escaped outside code spans.
_CODE_SPAN = re.compile(r"(``.*?``|:\w+:`[^`]*`|`[^`]*`)")


def _escape_text(text: str) -> str:
    text = text.replace("|", r"\|")
    return re.sub(r"(?<=\w)_(?=\W|$)", r"\_", text)


def escape_plain_text(app, what, name, obj, options, lines) -> None:
    for i, line in enumerate(lines):
        parts = _CODE_SPAN.split(line)
        lines[i] = "".join(p if j % 2 else _escape_text(p) for j, p in enumerate(parts))


def public_bases(app, name, obj, options, bases) -> None:
    """Private base classes (``_PoolBase``) are not documented: show their public ancestors."""
    out = []
    todo = list(bases)
    while todo:
        base = todo.pop(0)
        if base.__name__.startswith("_") and base.__module__.split(".")[0] == "gpumat":
            todo[:0] = list(base.__bases__)
        elif base not in out:
            out.append(base)
    bases[:] = out


def resolve_by_object(app, env, node, contnode):
    """A reference to any public path of a gpumat object (``gpumat.runtime.Executor``,
    ``gpumat.graph.gradients``) resolves to where the object is documented, whatever the role."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("gpumat"):
        return None
    catalogue = getattr(app, "gpumat_catalogue", None)
    if catalogue is None:
        return None
    try:
        obj = _lookup(target)
    except (ImportError, AttributeError):
        return None  # not a gpumat name: nitpicky reports it
    home = obj.__name__ if inspect.ismodule(obj) else catalogue.home.get(id(obj))
    if inspect.isclass(getattr(obj, "__self__", None)) or home is None:
        return None
    found = env.get_domain("py").resolve_any_xref(
        env, node["refdoc"], app.builder, home, node, contnode
    )
    return found[0][1] if found else None


def _lookup(dotted: str):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


# ---- the notebooks' kernel ------------------------------------------------------------------


def kernel_spec(app) -> None:
    """A Jupyter kernel that runs this interpreter (an installed ``python3`` spec may start
    another environment's Python), used for every notebook."""
    import os

    spec_dir = Path(app.doctreedir) / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "gpumat site",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    paths = os.environ.get("JUPYTER_PATH", "")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in [str(spec_dir.parents[1]), paths] if p)


# ---- the offline link check -----------------------------------------------------------------


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, value)

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.ids.add(value)
            elif key in ("href", "src") and value is not None:
                self.links.append((tag, key, value))


def check_links(outdir: Path) -> list[str]:
    """The problems of a built HTML site: see the module docstring."""
    pages: dict[Path, _Page] = {}
    for path in sorted(outdir.rglob("*.html")):
        page = _Page()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        pages[path.resolve()] = page
    problems = []
    for path, page in pages.items():
        where = path.relative_to(outdir.resolve())
        for tag, attr, value in page.links:
            parts = urlsplit(value)
            if parts.scheme in ("mailto", "data", "javascript"):
                continue
            if parts.scheme or value.startswith("//"):
                if tag != "a":
                    problems.append(
                        f"{where}: <{tag} {attr}={value!r}> loads from outside the site"
                    )
                elif parts.scheme != "https":
                    problems.append(f"{where}: {value!r}: only https links may leave the site")
                continue
            if parts.path.startswith("/"):
                problems.append(f"{where}: {value!r}: an absolute path leaves the site")
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_relative_to(outdir.resolve()):
                problems.append(f"{where}: {value!r} points outside the site")
            elif not target.exists():
                problems.append(f"{where}: {value!r}: no such file")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else set()
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{where}: {value!r}: no id {parts.fragment!r} there")
    return problems


def after_build(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    problems = check_links(Path(app.outdir))
    if problems:
        shown = "\n  ".join(problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        raise ExtensionError(f"{len(problems)} broken links in the site:\n  {shown}{more}")
    logger.info("link check: every link and resource of the site resolves inside it")


def setup(app):
    app.connect("builder-inited", generate_api)
    app.connect("autodoc-process-docstring", escape_plain_text)
    app.connect("autodoc-process-bases", public_bases)
    app.connect("missing-reference", resolve_by_object)
    app.connect("builder-inited", kernel_spec)
    app.connect("build-finished", after_build)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
