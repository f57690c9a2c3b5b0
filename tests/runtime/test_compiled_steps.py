"""Compiled executor steps and CUDA graphs: ``Executor(compiled=True, cuda_graph=True)``.

The first run of a plan calls the ops from Python while ``gpumat.ops.trace_calls`` records their
kernel calls; later runs replay them in C++ (``gpumat._core.NativeProgram``), and on CUDA or the
emulated device the step is captured into a CUDA graph on its second run and launched as one graph
after. Every check compares the compiled runs with the Python runs of the same plan bit for bit
(the same kernels in the same order), over several runs with fresh random feeds and parameters
that change between runs, and the graph path with float64 numpy.
"""

import numpy as np
import pytest

import gpumat
from gpumat import autodiff as ad
from gpumat import models, ops
from gpumat.optim import SGD
from gpumat.runtime import Executor


def _feeds(model, batch, seed):
    rng = np.random.default_rng(seed)
    x = rng.random((batch, *model.input_shape), dtype=np.float32)
    y = np.eye(model.num_classes, dtype=np.float32)[rng.integers(0, model.num_classes, batch)]
    return x, y


def _train(model, ctx, runs, batch, **flags):
    """Loss and gradients of `runs` SGD steps (numpy copies), and the executor."""
    ex = Executor([model.loss, *model.grads], device=ctx, **flags)
    params = [gpumat.array(v, ctx) for v in model.initial_values.values()]
    opt = SGD(params, lr=0.1)
    history = []
    fed = dict(zip(model.params.values(), params, strict=True))
    for run in range(runs):
        x, y = _feeds(model, batch, seed=run)
        out = ex.run({model.x: x, model.y_: y, **fed})
        history.append([v.asnumpy() for v in out])
        opt.step(out[1:])
    return history, ex


MODELS = {
    "logreg": (models.logreg, 32),
    "mlp": (models.mlp, 48),
    "mlp_dropout": (lambda: models.mlp(dropout=0.3), 48),
    "cnn": (models.cnn, 4),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_runs_equal_python_runs(ctx, name):
    build, batch = MODELS[name]
    model = build()
    python, ex_py = _train(model, ctx, 5, batch, compiled=False)
    compiled, ex = _train(model, ctx, 5, batch)
    for run, (a, b) in enumerate(zip(python, compiled, strict=True)):
        for k, (u, v) in enumerate(zip(a, b, strict=True)):
            assert np.array_equal(u, v), f"run {run}, output {k}: max diff {np.abs(u - v).max()}"
    assert ex_py.schedule_report.mode == "python"
    report = ex.schedule_report
    if ctx.device_type == "cpu":
        assert report.mode == "compiled" and report.reason == "no CUDA graphs on cpu"
    elif name == "mlp_dropout":
        assert report.mode == "compiled" and "dropout" in report.reason
    else:
        assert report.mode == "cuda-graph", str(report)
        assert report.captures == 1 and report.graph_nodes >= report.ops


def test_graph_step_matches_float64_numpy(gpu_ctx):
    model = models.mlp()
    params = {k: v.astype(np.float64) for k, v in model.initial_values.items()}
    ex = Executor([model.loss, *model.grads], device=gpu_ctx)
    dev = {model.params[k]: gpumat.array(v, gpu_ctx) for k, v in params.items()}
    ref = Executor([model.loss, *model.grads], device=None)
    for run in range(4):
        x, y = _feeds(model, 40, seed=100 + run)
        got = ex.run({model.x: x, model.y_: y, **dev}, convert_to_numpy_ret_vals=True)
        want = ref.run(
            {
                model.x: x.astype(np.float64),
                model.y_: y.astype(np.float64),
                **{model.params[k]: v for k, v in params.items()},
            }
        )
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)
    assert ex.schedule_report.mode == "cuda-graph"


def test_graph_recaptures_when_fed_arrays_move(gpu_ctx):
    model = models.logreg()
    ex = Executor([model.loss, *model.grads], device=gpu_ctx)
    ref = Executor([model.loss, *model.grads], device=gpu_ctx, compiled=False)
    captures = []
    for run in range(9):
        x, y = _feeds(model, 16, seed=run)
        rng = np.random.default_rng(run)
        fresh = {
            model.params[k]: gpumat.array(rng.normal(size=v.shape).astype(np.float32), gpu_ctx)
            for k, v in model.initial_values.items()
        }
        got = ex.run({model.x: x, model.y_: y, **fresh}, convert_to_numpy_ret_vals=True)
        want = ref.run({model.x: x, model.y_: y, **fresh}, convert_to_numpy_ret_vals=True)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w)
        captures.append(ex.schedule_report.captures)
    # run 0 traces, run 1 warms up, runs 2.. capture for each new address, until the limit
    assert captures[2:6] == [1, 2, 3, 4]
    report = ex.schedule_report
    assert report.mode == "compiled" and "moved" in report.reason


def test_dropout_graph_in_evaluation_mode_and_seeds_in_training(gpu_ctx):
    x = ad.Variable("x")
    y = gpumat.graph.dropout_op(x, 0.5, seed=7) * 2.0
    data = np.random.default_rng(1).random((30, 20), dtype=np.float32)
    ex = Executor([y], device=gpu_ctx, training=False)
    for _ in range(3):
        (out,) = ex.run({x: data}, convert_to_numpy_ret_vals=True)
        np.testing.assert_array_equal(out, data * np.float32(2.0))
    assert ex.schedule_report.mode == "cuda-graph"
    ex.training = True
    ref = Executor([y], device=gpu_ctx, compiled=False)
    ref.step = ex.step
    masks = []
    for _ in range(4):
        (out,) = ex.run({x: data}, convert_to_numpy_ret_vals=True)
        (want,) = ref.run({x: data}, convert_to_numpy_ret_vals=True)
        np.testing.assert_array_equal(out, want)
        masks.append(out != 0)
    assert ex.schedule_report.mode == "compiled" and "dropout" in ex.schedule_report.reason
    assert not np.array_equal(masks[-1], masks[-2])  # a fresh mask each step


def test_new_feed_shape_replans_and_recompiles(ctx):
    model = models.mlp()
    ex = Executor([model.loss, *model.grads], device=ctx)
    ref = Executor([model.loss, *model.grads], device=ctx, compiled=False)
    params = {model.params[k]: gpumat.array(v, ctx) for k, v in model.initial_values.items()}
    for run, batch in enumerate([32, 32, 32, 16, 16, 16, 32]):
        x, y = _feeds(model, batch, seed=run)
        got = ex.run({model.x: x, model.y_: y, **params}, convert_to_numpy_ret_vals=True)
        want = ref.run({model.x: x, model.y_: y, **params}, convert_to_numpy_ret_vals=True)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w)
    # The last run traced the replanned step: the next one is compiled (a graph on the one after).
    assert ex.schedule_report.mode == "compiled"


class _UserAdd(ad.Op):
    """A user-defined op (defined outside gpumat): not compiled unless it opts in."""

    name = "user_add"

    def __call__(self, a, b):
        node = ad.Op.__call__(self)
        node.inputs = [a, b]
        node.name = f"UserAdd({a.name},{b.name})"
        return node

    def compute(self, node, input_vals, output_val, ctx=None):
        if ctx is None:
            np.add(input_vals[0], input_vals[1], out=output_val)
        else:
            ops.add(input_vals[0], input_vals[1], output_val)

    def gradient(self, node, output_grad):
        return [output_grad, output_grad]

    def infer_shape(self, node, input_shapes):
        return input_shapes[0]


class _CompilableUserAdd(_UserAdd):
    compilable = True


@pytest.mark.parametrize("op_class", [_UserAdd, _CompilableUserAdd])
def test_user_ops_compile_only_when_they_opt_in(ctx, op_class):
    a, b = ad.Variable("a"), ad.Variable("b")
    out = ad.relu_op(op_class()(a, b))
    ex = Executor([out], device=ctx)
    rng = np.random.default_rng(3)
    for _ in range(3):
        va, vb = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
        (got,) = ex.run({a: va, b: vb}, convert_to_numpy_ret_vals=True)
        np.testing.assert_allclose(got, np.maximum(va + vb, 0.0), rtol=1e-6, atol=1e-6)
    report = ex.schedule_report
    if op_class is _UserAdd:
        assert report.mode == "python" and "user_add" in report.reason
    else:
        assert report.mode in ("compiled", "cuda-graph")


def test_graph_replays_count_their_launches(gpu_ctx):
    model = models.mlp()
    params = {model.params[k]: gpumat.array(v, gpu_ctx) for k, v in model.initial_values.items()}
    x, y = _feeds(model, 24, seed=5)
    counts = {}
    for compiled in (False, True):
        ex = Executor([model.loss, *model.grads], device=gpu_ctx, compiled=compiled)
        deltas = []
        for _ in range(4):
            before = gpumat.launch_count(gpu_ctx)
            ex.run({model.x: x, model.y_: y, **params})
            deltas.append(gpumat.launch_count(gpu_ctx) - before)
        counts[compiled] = deltas
    assert counts[True] == counts[False]
    assert ex.schedule_report.mode == "cuda-graph"


def test_flags_turn_compilation_and_graphs_off(gpu_ctx):
    model = models.logreg()
    params = {model.params[k]: gpumat.array(v, gpu_ctx) for k, v in model.initial_values.items()}
    x, y = _feeds(model, 8, seed=0)
    modes = {}
    for flags in ({"compiled": False}, {"cuda_graph": False}, {}):
        ex = Executor([model.loss], device=gpu_ctx, **flags)
        for _ in range(3):
            ex.run({model.x: x, model.y_: y, **params})
        modes[tuple(flags)] = (ex.schedule_report.mode, ex.schedule_report.reason)
    assert modes[("compiled",)] == ("python", "compiled=False")
    assert modes[("cuda_graph",)] == ("compiled", "cuda_graph=False")
    assert modes[()] == ("cuda-graph", "")
    with pytest.raises(TypeError, match="compiled"):
        Executor([model.loss], device=gpu_ctx, compiled="yes")
    with pytest.raises(TypeError, match="cuda_graph"):
        Executor([model.loss], device=gpu_ctx, cuda_graph=1)


def test_numpy_executor_reports_numpy():
    x = ad.Variable("x")
    ex = Executor([x * 2.0])
    assert ex.schedule_report is None
    ex.run({x: np.ones((2, 2))})
    assert ex.schedule_report.mode == "numpy"


def test_trace_calls_records_the_calls_and_runs_them(ctx):
    rng = np.random.default_rng(0)
    a = gpumat.array(rng.normal(size=(3, 4)), ctx)
    b = gpumat.array(rng.normal(size=(4, 2)), ctx)
    c = gpumat.empty((3, 2), ctx)
    with ops.trace_calls() as calls:
        ops.matmul(a, b, c)
        with pytest.raises(RuntimeError, match="another trace"):
            with ops.trace_calls():
                pass
    assert [name for name, _ in calls] == ["matmul_"]
    assert calls[0][1][1] is False and calls[0][1][4] is c
    np.testing.assert_allclose(c.asnumpy(), a.asnumpy() @ b.asnumpy(), rtol=1e-5, atol=1e-6)
    ops.relu(c, c)  # no longer recorded
    assert len(calls) == 1


def test_native_program_rejects_bad_input(ctx):
    from gpumat import _core

    prog = _core.NativeProgram(*ctx._native)
    buf = gpumat.empty((6,), ctx)
    a = prog.add_fixed(buf, (2, 3))
    b = prog.add_input(0, (2, 3))
    with pytest.raises(ValueError, match="exceeds"):
        prog.add_fixed(buf, (7,))
    with pytest.raises(ValueError, match="no op named 'sgd_update_multi'"):
        prog.add_step("sgd_update_multi", [a], [])
    with pytest.raises(ValueError, match="takes 2 arrays and 0 scalars"):
        prog.add_step("relu", [a], [])
    with pytest.raises(ValueError, match="no array number 9"):
        prog.add_step("relu", [a, 9], [])
    prog.add_step("relu", [b, a], [])
    with pytest.raises(ValueError, match="0 inputs for a program of 1"):
        prog.run([], 0)
    with pytest.raises(TypeError, match="input 0"):
        prog.run([np.zeros((2, 3), np.float32)], 0)
    with pytest.raises(ValueError, match="holds 4 floats"):
        prog.run([gpumat.empty((4,), ctx)], 0)
    other = gpumat.cpu() if ctx.device_type != "cpu" else gpumat.emu()
    with pytest.raises(ValueError, match="runs on"):
        prog.run([gpumat.empty((2, 3), other)], 0)
    src = np.random.default_rng(2).normal(size=(2, 3)).astype(np.float32)
    prog.run([gpumat.array(src, ctx)], 0)
    np.testing.assert_array_equal(buf.asnumpy().reshape(2, 3), np.maximum(src, 0))


def test_a_trace_on_another_thread_delays_compilation(ctx):
    import threading

    x = ad.Variable("x")
    ex = Executor([ad.relu_op(x * 3.0)], device=ctx)
    data = np.random.default_rng(4).normal(size=(6, 5))
    results, reports = [], []

    def work():
        results.append(ex.run({x: data})[0].asnumpy())
        reports.append(ex.schedule_report)  # the worker thread's own plan

    with ops.trace_calls():  # this thread holds the one trace
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    np.testing.assert_allclose(results[0], np.maximum(data * 3.0, 0.0), rtol=1e-6, atol=1e-6)
    assert reports[0].mode == "python" and "next run" in reports[0].reason
    (again,) = ex.run({x: data}, convert_to_numpy_ret_vals=True)
    np.testing.assert_allclose(again, results[0], rtol=0, atol=0)
    assert ex.schedule_report.mode == "compiled"


# --------------------------------------------------------------------------------------------------
# A captured graph and what happens around it: workspaces that move, other threads' kernels
# --------------------------------------------------------------------------------------------------


_WORKSPACE_CHILD = r"""
import sys
import numpy as np
import gpumat
from gpumat import autodiff as ad, ops
from gpumat.runtime import Executor

ctx = {"emu": gpumat.emu(0), "gpu": gpumat.gpu(0)}[sys.argv[1]]
rng = np.random.default_rng()
x, w = ad.Variable("x"), ad.Variable("w")
ex = Executor([ad.relu_op(ad.conv2d_op(x, w, 1, 1))], device=ctx)
xn, wn = rng.normal(size=(2, 1, 8, 8)), rng.normal(size=(3, 1, 3, 3))
wd = gpumat.array(wn, ctx)
for _ in range(3):
    (before,) = ex.run({x: xn, w: wd}, convert_to_numpy_ret_vals=True)
assert ex.schedule_report.mode == "cuda-graph" and ex.schedule_report.captures == 1
# A larger convolution grows the workspace; the freed blocks go back to the device.
big = [gpumat.array(rng.normal(size=s), ctx) for s in [(4, 8, 32, 32), (8, 8, 3, 3)]]
ops.conv2d(big[0], big[1], gpumat.empty((4, 8, 32, 32), ctx), 1, 1)
gpumat.empty_cache(ctx)
# New arrays of the old workspace's sizes take the freed memory.
sizes = [n for n in (648, 1296, 2592) for _ in range(4)]
bystanders = [gpumat.array(np.full(n, 7.0), ctx) for n in sizes]
(after,) = ex.run({x: xn, w: wd}, convert_to_numpy_ret_vals=True)
np.testing.assert_array_equal(after, before)
assert all(np.all(b.asnumpy() == 7.0) for b in bystanders)
assert ex.schedule_report.mode == "cuda-graph" and ex.schedule_report.captures == 2
"""


def test_a_graph_is_recaptured_when_a_workspace_moves(gpu_ctx):
    """A captured convolution step holds the device's im2col workspace address; a larger
    convolution elsewhere reallocates that workspace and frees the old block. The next run must
    capture again, never replay into the freed block (which the allocator hands to new arrays).
    In a fresh process, so that the workspace is sure to grow (and a crash fails this test)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-P", "-c", _WORKSPACE_CHILD, gpu_ctx.device_type],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_another_threads_kernels_are_never_captured(gpu_ctx):
    """While one thread captures a step into a CUDA graph, another thread keeps launching kernels
    on the same device: they run (and only once), and the graphs hold only their own steps."""
    import threading

    counter = gpumat.array(np.zeros(64), gpu_ctx)
    stop = threading.Event()
    increments = []

    def other_thread():
        n = 0
        while not stop.is_set():
            ops.add_scalar(counter, 1.0, counter)
            n += 1
        increments.append(n)

    worker = threading.Thread(target=other_thread)
    worker.start()
    rng = np.random.default_rng()
    try:
        for _ in range(12):  # each executor captures once (on its second run)
            x = ad.Variable("x")
            ex = Executor([ad.relu_op(x * 2.0) + 1.0], device=gpu_ctx)
            xn = rng.normal(size=(16, 16))
            for _ in range(4):
                (out,) = ex.run({x: xn}, convert_to_numpy_ret_vals=True)
                np.testing.assert_allclose(out, np.maximum(2 * xn, 0) + 1, rtol=1e-6)
            assert ex.schedule_report.mode == "cuda-graph" and ex.schedule_report.graph_nodes == 3
    finally:
        stop.set()
        worker.join()
    np.testing.assert_array_equal(counter.asnumpy(), np.full(64, float(increments[0])))


# The front end's ops (exp, log, div) replayed by compiled steps and CUDA graphs: each graph's
# compiled and graph runs equal its Python runs bit for bit, with fresh feeds every run.
FRONTEND_GRAPHS = {
    "exp_log_div": lambda a, b: ad.log_op(ad.div_op(ad.exp_op(a), ad.exp_op(b))),
    "eq": lambda a, b: ad.mul_op(ad.eq_op(a, ad.mul_byconst_op(a, 1.0)), b),
    "argmax": lambda a, b: ad.add_op(ad.argmax_op(a, 1), ad.reduce_sum_op(b, 1)),
    "one_hot": lambda a, b: ad.mul_op(ad.one_hot_op(ad.argmax_op(a, 1), 5), b),
}


@pytest.mark.parametrize("name", list(FRONTEND_GRAPHS))
def test_frontend_ops_compile_and_replay(ctx, name):
    a, b = ad.Variable("a"), ad.Variable("b")
    out = FRONTEND_GRAPHS[name](a, b)
    grads = ad.gradients(out, [a, b])
    ex = Executor([out, *grads], device=ctx)
    ref = Executor([out, *grads], device=ctx, compiled=False)
    rng = np.random.default_rng(11)
    for _ in range(4):
        feeds = {a: rng.uniform(-2, 2, (7, 5)), b: rng.uniform(-2, 2, (7, 5))}
        got = ex.run(feeds, convert_to_numpy_ret_vals=True)
        want = ref.run(feeds, convert_to_numpy_ret_vals=True)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w, equal_nan=True)
    expected = "compiled" if ctx.device_type == "cpu" else "cuda-graph"
    assert ex.schedule_report.mode == expected, str(ex.schedule_report)
