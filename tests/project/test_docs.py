"""The docs stay true: every gpumat name they mention exists, their Python examples run, their
commands use scripts, options, make targets and pip extras that exist, the paths they name are in
the repository, their tables are what benchmarks/make_table.py builds from the ledger, and no
number outside those tables looks like a measurement.

Docs: README.md, docs/*.md and benchmarks/README.md. Names are taken from code spans and code
blocks: dotted ``gpumat.x.y`` names, and in Python blocks the ``import``/``from ... import`` lines
and the attributes of the names they bind (``ad.matmul_op`` after ``import gpumat.autodiff as
ad``). The links are checked in test_repository.py.
"""

import ast
import importlib
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import make_table  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks/README.md"]
DOC_IDS = [str(d.relative_to(ROOT)) for d in DOCS]

_FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_SPAN = re.compile(r"`([^`]+)`")
_GENERATED = re.compile(r"<!-- make_table: ([\w-]+)\b.*?<!-- /make_table: \1 -->", re.S)
_GPUMAT_NAME = re.compile(r"(?<![\w./-])gpumat(?:\.[A-Za-z_]\w*)+")
_REPO_PATH = re.compile(
    r"(?<![\w./-])((?:examples|benchmarks|extensions|gpumat|tests|scripts|docs)/[\w./*-]*)"
)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]


def code_spans(text: str) -> list[str]:
    """The inline code spans outside fenced blocks (line breaks inside a span become spaces)."""
    return [s.replace("\n", " ") for s in _SPAN.findall(_FENCE.sub("", text))]


def prose(text: str) -> str:
    """The text without fenced blocks, code spans, generated tables and link targets."""
    text = _GENERATED.sub("", _FENCE.sub("", text))
    return re.sub(r"\]\([^)]*\)", "]", _SPAN.sub("", text))


def resolve(dotted: str):
    """Imports the longest module prefix of ``dotted`` and looks the rest up as attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not (name == exc.name or name.startswith(f"{exc.name}.")):
                raise  # the module exists but one of its own imports is missing
            continue
        break
    else:
        raise ModuleNotFoundError(dotted)
    for attr in parts[i:]:
        obj = getattr(obj, attr)
    return obj


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def python_names(code: str) -> tuple[set[str], dict[str, str]]:
    """The gpumat names a Python block uses, and the aliases its imports bind."""
    tree = ast.parse(code)
    names, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "gpumat":
                    names.add(a.name)
                    aliases[a.asname or "gpumat"] = a.name if a.asname else "gpumat"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "gpumat":
                for a in node.names:
                    names.add(f"{node.module}.{a.name}")
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        dotted = _dotted(node) if isinstance(node, ast.Attribute) else None
        if dotted and dotted.split(".")[0] in aliases:
            root, _, rest = dotted.partition(".")
            names.add(f"{aliases[root]}.{rest}")
    return names, aliases


def doc_names(text: str) -> set[str]:
    """Every gpumat name a doc mentions in its code (see the module docstring)."""
    names, aliases, conflicts = set(), {}, set()
    for lang, code in code_blocks(text):
        if lang == "python":
            found, bound = python_names(code)
            names |= found
            for k, v in bound.items():
                if aliases.setdefault(k, v) != v:
                    conflicts.add(k)
        else:
            names.update(_GPUMAT_NAME.findall(code))
    for k in conflicts:
        aliases.pop(k)
    for span in code_spans(text):
        names.update(_GPUMAT_NAME.findall(span))
        for m in re.finditer(r"(?<![\w.])([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)+)", span):
            if m.group(1) in aliases and m.group(1) != "gpumat":
                names.add(aliases[m.group(1)] + m.group(2))
    return names


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_every_gpumat_name_in_the_docs_exists(doc):
    names = doc_names(doc.read_text())
    missing = []
    for name in sorted(names):
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    assert not missing, f"{doc.name} names what gpumat does not have:\n" + "\n".join(missing)


def test_the_name_parser_finds_the_api_lists():
    # Guards the test above against a parser that finds nothing: the API page lists every kernel
    # and graph op, README's example uses a dozen names.
    api = doc_names((ROOT / "docs/api.md").read_text())
    assert {"gpumat.ops.matmul", "gpumat.graph.conv2d_op", "gpumat.optim.Adam"} <= api
    assert len(api) > 100
    readme = doc_names((ROOT / "README.md").read_text())
    assert {"gpumat.runtime.Executor", "gpumat.ops.matmul", "gpumat.cpu"} <= readme
    assert "gpumat.nn.no_such_op" in doc_names("`gpumat.nn.no_such_op(x)`")
    with pytest.raises(AttributeError):
        resolve("gpumat.nn.no_such_op")
    block = "```python\nimport gpumat.autodiff as ad\nad.relu_op(ad.Variable('x'))\n```\n"
    block += "`ad.tanh_op`"
    assert {"gpumat.autodiff.relu_op", "gpumat.autodiff.Variable", "gpumat.autodiff.tanh_op"} <= (
        doc_names(block)
    )


# ---- the Python examples run ----------------------------------------------------------------

_EXAMPLES = [
    pytest.param(doc, i, code, id=f"{doc.relative_to(ROOT)}[{i}]")
    for doc in DOCS
    for i, (lang, code) in enumerate(b for b in code_blocks(doc.read_text()) if b[0] == "python")
    if "from gpumat.ops import (" not in code and "from gpumat.autodiff import (" not in code
]


def test_there_are_examples_to_run():
    assert len(_EXAMPLES) >= 6


@pytest.mark.parametrize(("doc", "index", "code"), _EXAMPLES)
def test_python_example_runs(doc, index, code, tmp_path):
    command = [sys.executable, "-P", "-c", code]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    if proc.returncode and "No module named 'torch'" in proc.stderr:
        pytest.skip("needs PyTorch (the test extra)")
    if proc.returncode and "DatasetError" in proc.stderr:
        pytest.skip("MNIST unavailable: no cached copy and no network")
    assert proc.returncode == 0, f"{doc.name} example {index}:\n{code}\n{proc.stderr}"
    if doc.name == "README.md" and index == 0:
        # The short API example: its loss with W = 0 is log 10.
        assert "[2.302585" in proc.stdout, proc.stdout


def test_api_lists_import_as_written():
    # The two name lists of docs/api.md are import statements: they must run as they stand.
    for lang, code in code_blocks((ROOT / "docs/api.md").read_text()):
        if lang == "python" and code.startswith("from gpumat."):
            exec(compile(code, "docs/api.md", "exec"), {})


# ---- commands --------------------------------------------------------------------------------


@cache
def _script_options(script: str) -> tuple[frozenset, dict]:
    """The option strings of a script's --help, and the choices of its options that have them."""
    # Not -P: the benchmarks import their neighbour _common.py from the script's folder.
    command = [sys.executable, script, "--help"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    options = frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", proc.stdout))
    choices = {
        m.group(1): set(m.group(2).split(","))
        for m in re.finditer(r"(--?[\w-]+) \{([^}]*)\}", proc.stdout)
    }
    return options, choices


def _make_targets(folder: Path) -> set[str]:
    text = (folder / "Makefile").read_text()
    return set(re.findall(r"^([\w.-]+)\s*:(?!=)", text, re.M))


def _extras() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([\w-]+)\s*=", section, re.M))


def doc_commands(text: str) -> list[str]:
    """Shell command lines: the lines of bash blocks and the code spans that run something."""
    lines = []
    for lang, code in code_blocks(text):
        if lang in ("bash", "sh", "shell"):
            lines += [ln for ln in code.splitlines() if ln.strip() and not ln.startswith(" ")]
    lines += [s for s in code_spans(text) if re.match(r"(python3? |make |pip |mpiexec |bash )", s)]
    return [re.split(r"\s+#", ln, maxsplit=1)[0].strip() for ln in lines]


def check_command(line: str) -> list[str]:
    """What is wrong with one command line (an empty list when nothing is)."""
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        return [f"{line!r}: {exc}"]
    problems = []
    for i, tok in enumerate(tokens):
        if tok.endswith(".py") and (ROOT / tok).parent in (ROOT / "examples", ROOT / "benchmarks"):
            if not (ROOT / tok).exists():
                return [f"{line!r}: no {tok}"]
            options, choices = _script_options(tok)
            args = tokens[i + 1 :]
            for j, arg in enumerate(args):
                if not re.match(r"--?[A-Za-z]", arg):
                    continue
                opt = arg.split("=", 1)[0]
                if opt not in options:
                    problems.append(f"{line!r}: {tok} has no option {opt}")
                elif opt in choices and j + 1 < len(args) and args[j + 1] not in choices[opt]:
                    problems.append(f"{line!r}: {opt} {args[j + 1]} is not one of {choices[opt]}")
            break
        if tok == "make" and tokens[i + 1 : i + 2] == ["-C"]:
            folder = ROOT / tokens[i + 2]
            targets = [t for t in tokens[i + 3 :] if "=" not in t and not t.startswith("-")]
            missing = set(targets) - _make_targets(folder)
            problems += [f"{line!r}: {folder.name}/Makefile has no target {t}" for t in missing]
            break
        if tok == "pip" and "install" in tokens:
            for extra in re.findall(r"^\.\[([\w,-]+)\]$", tokens[-1]):
                missing = set(extra.split(",")) - _extras()
                problems += [f"{line!r}: pyproject.toml has no extra {e}" for e in missing]
            break
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_commands_use_options_and_targets_that_exist(doc):
    problems = [p for line in doc_commands(doc.read_text()) for p in check_command(line)]
    assert not problems, "\n".join(problems)


def test_the_command_checker_sees_mistakes():
    assert check_command("python examples/mnist.py -m mlp -c cpu -e 10 -l --plot x.png") == []
    assert check_command("python examples/mnist.py --no-such-flag")
    assert check_command("python examples/mnist.py -c tpu")
    assert check_command("make -C extensions emu-nothing")
    assert check_command('pip install ".[nothing]"')
    assert len(doc_commands((ROOT / "README.md").read_text())) >= 4


# ---- paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_paths_in_code_exist(doc):
    text = doc.read_text()
    code = [c for _, c in code_blocks(text)] + code_spans(text)
    missing = []
    for chunk in code:
        for path in _REPO_PATH.findall(chunk):
            path = path.rstrip(".,:;")
            if not (list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
                missing.append(path)
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


# ---- tables and numbers ----------------------------------------------------------------------


def test_generated_tables_match_the_ledger():
    runs = make_table.load_runs([make_table.RESULTS_DIR])
    stale = make_table.stale_blocks(make_table.doc_files(ROOT), runs)
    assert not stale, f"stale tables (run python3 benchmarks/make_table.py --write): {stale}"


def test_the_docs_hold_their_generated_tables():
    blocks = {
        "README.md": {"mnist-summary"},
        "benchmarks/README.md": {"ops", "mnist", "distributed"},
        "docs/distributed.md": {"distributed-summary"},
    }
    for doc, names in blocks.items():
        found = {m.group(1) for m in _GENERATED.finditer((ROOT / doc).read_text())}
        assert found >= names, doc


def test_a_ledger_change_makes_a_table_stale(tmp_path):
    runs = make_table.load_runs([make_table.RESULTS_DIR])
    doc = tmp_path / "README.md"
    doc.write_text(
        "x\n" + make_table.BEGIN_MARKER.format("distributed-summary") + "\n<!-- /make_table: "
        "distributed-summary -->\n"
    )
    assert make_table.stale_blocks([doc], runs) == [f"{doc}: distributed-summary"]
    make_table.write_docs([doc], runs)
    assert make_table.stale_blocks([doc], runs) == []
    assert "| ranks |" in doc.read_text()
    # Without the latest data-parallel run, the block would show another one: stale.
    distributed = [r for r in runs if r[1]["benchmark"] == "distributed"]
    latest = max(distributed, key=lambda r: r[1]["date"])
    assert make_table.stale_blocks([doc], [r for r in runs if r is not latest])
    doc.write_text("<!-- make_table: nonsense -->\n<!-- /make_table: nonsense -->\n")
    with pytest.raises(ValueError, match="unknown make_table block"):
        make_table.stale_blocks([doc], runs)
    doc.write_text(make_table.BEGIN_MARKER.format("ops") + "\n")
    with pytest.raises(ValueError, match="has no"):
        make_table.stale_blocks([doc], runs)


# A measured-looking number: seconds or rates with decimals, accuracies like 0.97xx.
_MEASURED = re.compile(
    r"\b\d+\.\d+ ?(?:s|ms|µs|us)\b|\b\d[\d.,]* ?(?:GB/s|GFLOP/s|TFLOP/s|steps/s)|\b0\.9\d{2,}\b"
)


@pytest.mark.parametrize("doc", DOCS[:-1], ids=DOC_IDS[:-1])
def test_user_docs_show_no_number_outside_the_generated_tables(doc):
    found = _MEASURED.findall(prose(doc.read_text()))
    assert not found, f"{doc.name}: measurements belong in a generated table: {found}"


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_docs_use_the_projects_names(doc):
    text = doc.read_text()
    assert not re.search(r"\bissues? #?\d+", text, re.I), "no issue numbers in the docs"
    course = re.findall(r"\bseed(?:'s|-compatible|\s+(?:assignment|skeleton|recipe|course))", text)
    assert not course, f"'seed' means a random seed; the course is 'the dlsys course': {course}"
    assert "/work/" not in text and "../shared" not in text


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
