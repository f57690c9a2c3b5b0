"""The package's shape: layers import only downward, no import cycle, no module importing the faces.

Read statically (``ast``) from the installed package's sources, so a cycle that Python happens to
resolve at run time (a lazy import, an import inside a function) is still found. An import edge
goes from a module to the module it names: ``from gpumat import ops`` names ``gpumat.ops`` (a
submodule), ``from gpumat import array`` names the package face ``gpumat``.
"""

import ast
import inspect
import pathlib

import pytest

import gpumat

PACKAGE_DIR = pathlib.Path(gpumat.__file__).parent

# The faces: they only re-export (gpumat's own package face and the dlsys course's names); no
# other module of gpumat imports them.
FACES = {
    "gpumat",
    "gpumat.autodiff",
    "gpumat.gpu_op",
    "gpumat.ndarray",
    "gpumat.nn",
    "gpumat.dlsys",
    "gpumat.dlsys.autodiff",
    "gpumat.dlsys.gpu_op",
    "gpumat.dlsys.ndarray",
    "gpumat.__main__",
    "gpumat.utils",
    "gpumat.utils.data",
}

# The layers, bottom up (docs/ARCHITECTURE.md). A module may import its own layer and those below.
LAYERS = [
    {"gpumat._core", "gpumat._build_config", "gpumat._checks"},
    {
        "gpumat.devices",
        "gpumat.dtypes",
        "gpumat.random",
        "gpumat.cuda",
        "gpumat.accelerator",
        "gpumat._host_blas",
    },
    {"gpumat.arrays"},
    {
        "gpumat.ops",
        "gpumat._ops_pointwise",
        "gpumat.reference",
        "gpumat.dlpack",
        "gpumat.checkpoint",
        "gpumat.profile",
    },
    {"gpumat.graph", "gpumat.broadcasting"},  # and gpumat.graph.*
    {"gpumat.runtime"},  # and gpumat.runtime.*
    {"gpumat.autograd", "gpumat._grad_plans"},
    {"gpumat.tensor"},
    {"gpumat.creation", "gpumat.functions"},
    {"gpumat.nn", "gpumat.optim", "gpumat.data", "gpumat.serialization", "gpumat.compiler"},
    {"gpumat.distributed", "gpumat.datasets"},
    {"gpumat.models"},
    {"gpumat.train"},
]

# Imports inside functions: only of optional or heavy third-party modules, never of gpumat's own.
LAZY_ALLOWED = {"mpi4py", "matplotlib", "ctypes", "safetensors", "tqdm"}


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, ast.Module]:
    return {
        _module_name(p): ast.parse(p.read_text(), str(p))
        for p in sorted(PACKAGE_DIR.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


MODULES = _modules()


def _is_module(name: str) -> bool:
    return name in MODULES or name in {"gpumat._core", "gpumat._build_config"}


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    is_package = (PACKAGE_DIR.parent / pathlib.Path(*module.split(".")) / "__init__.py").exists()
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, tree: ast.Module):
    """(imported gpumat module, line, inside a function) for every import of the module."""
    lazy_lines = {
        sub.lineno
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for sub in ast.walk(fn)
        if isinstance(sub, (ast.Import, ast.ImportFrom))
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, node.lineno in lazy_lines
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if _is_module(sub) else target), node.lineno, node.lineno in lazy_lines


def _gpumat_edges():
    for module, tree in MODULES.items():
        for target, line, lazy in _imports(module, tree):
            if target == "gpumat" or target.startswith("gpumat."):
                yield module, target, line, lazy


def _layer(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if module in layer or any(module.startswith(m + ".") for m in layer):
            return i
    raise KeyError(module)


def test_every_module_has_a_layer_or_is_a_face():
    placed = [m for m in MODULES if m not in FACES]
    unplaced = []
    for m in placed:
        try:
            _layer(m)
        except KeyError:
            unplaced.append(m)
    assert not unplaced, f"modules with no layer in LAYERS (add them there): {unplaced}"


def test_no_import_cycle():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for src, dst, _, _ in _gpumat_edges():
        if dst in graph and dst != src:
            graph[src].add(dst)
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(start):
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            for nxt in it:
                if state.get(nxt) == 1:
                    cycle = path[path.index(nxt) :] + [nxt]
                    pytest.fail("import cycle: " + " -> ".join(cycle))
                if nxt not in state:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(sorted(graph[nxt]))))
                    break
            else:
                state[node] = 2
                stack.pop()
                path.pop()

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_imports_only_go_down_the_layers():
    bad = []
    for src, dst, line, _ in _gpumat_edges():
        if src in FACES:
            continue
        if dst in FACES:
            bad.append(f"{src}:{line} imports the face {dst}")
        elif _layer(dst) > _layer(src):
            bad.append(f"{src}:{line} imports {dst}, a higher layer")
    assert not bad, "\n".join(bad)


def test_no_gpumat_import_inside_a_function():
    bad = []
    for module, tree in MODULES.items():
        for target, line, lazy in _imports(module, tree):
            if not lazy:
                continue
            if target == "gpumat" or target.startswith("gpumat."):
                bad.append(f"{module}:{line} imports {target} inside a function")
            elif target.split(".")[0] not in LAZY_ALLOWED:
                bad.append(f"{module}:{line} imports {target} inside a function (not optional)")
    assert not bad, "\n".join(bad)


def test_faces_only_reexport():
    # A face defines no functions or classes of its own (the dlsys course's namespace, whose ops
    # and names differ from gpumat's on purpose, is the exception: gpumat.dlsys.autodiff, .gpu_op
    # and .ndarray; gpumat.nn's one function resolves the graph ops it used to re-export).
    own = {
        "gpumat",
        "gpumat.dlsys.autodiff",
        "gpumat.dlsys.gpu_op",
        "gpumat.dlsys.ndarray",
        "gpumat.nn",
        "gpumat.__main__",
    }
    for face in FACES - own:
        tree = MODULES[face]
        defs = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert not defs, f"{face} defines {defs}; a face only re-exports"


def test_reference_has_the_kernel_api():
    """gpumat.reference is gpumat.ops for numpy arrays: the same functions, the same parameters."""
    from gpumat import ops, reference

    device_only = {"trace_calls", "set_conv_workspace_limit"}
    kernels = set(ops.__all__) - device_only
    assert kernels <= set(reference.__all__), kernels - set(reference.__all__)
    for name in sorted(kernels):
        want = list(inspect.signature(getattr(ops, name)).parameters)
        got = list(inspect.signature(getattr(reference, name)).parameters)
        assert got == want, f"reference.{name}{got} differs from ops.{name}{want}"


def test_import_gpumat_gives_every_layer():
    """``import gpumat`` alone makes the layers usable as attributes, as the Executor's docstring
    example uses them (``gpumat.optim.SGD`` once failed: nothing had imported gpumat.optim)."""
    import subprocess
    import sys

    code = (
        "import gpumat\n"
        "names = ('ops', 'reference', 'graph', 'runtime', 'optim', 'autodiff', 'nn', 'gpu_op',\n"
        "         'data', 'datasets', 'profile')\n"
        "for name in names:\n"
        "    assert hasattr(gpumat, name), name\n"
        "assert gpumat.optim.SGD and gpumat.runtime.Executor is gpumat.Executor\n"
        "assert gpumat.nn.functional.relu and gpumat.optim.lr_scheduler.StepLR\n"
        "assert gpumat.Tensor and gpumat.compile and gpumat.data.DataLoader\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
