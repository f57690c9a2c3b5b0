"""gpumat.profile: the emulated device's per-launch memory counters pinned to known truths, the
occupancy rules, the roofline model and the command line.

The known truths (each a textbook access pattern; the kernels are in
extensions/src/emu/selftest.cu, run through the private ``gpumat._core._emu_selftest``): a
coalesced copy asks 4 sectors per 128-byte warp request; a naive transpose's stores take a sector
per lane and a tiled one's do not; a shared tile read down a column with a stride of 32 floats
costs 32 wavefronts per request and the padded tile 1; the matrix product's tile loads are
coalesced and its shared tiles conflict-free in all four transpose cases.
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpumat
from gpumat import _core, ops
from gpumat import profile as gprof

pytestmark = pytest.mark.gpu  # CUDA kernel code, run on the emulated device


def profiled_selftest(name):
    """(values, the one launch record) of self-test ``name`` run under a profiler."""
    with gprof.profile() as prof:
        values = _core._emu_selftest(name, 0)
    assert len(prof.launches) == 1, [x["name"] for x in prof.launches]
    return np.array(values), prof.launches[0]


def metrics(launch):
    return gprof.derived(launch["counters"])


# ---------------------------------------------------------------------------- known truths


def test_coalesced_copy_is_4_sectors_per_128_byte_request():
    values, launch = profiled_selftest("profile_copy")
    np.testing.assert_array_equal(values, np.arange(1024, dtype=np.float32))
    c, m = launch["counters"], metrics(launch)
    assert c["global_load_requests"] == 1024 // 32 and c["global_store_requests"] == 1024 // 32
    assert m["load_sectors_per_request"] == 4 and m["store_sectors_per_request"] == 4
    assert m["load_efficiency"] == 1 and m["store_efficiency"] == 1
    assert m["lanes_per_request"] == 32
    assert c["dram_read_sectors"] == 1024 * 4 // 32 == c["dram_write_sectors"]
    assert c["blocks"] == 4 and c["threads"] == 1024 and c["barriers"] == 0


def test_naive_transpose_stores_are_uncoalesced_and_tiled_ones_are_not():
    expected = np.arange(4096, dtype=np.float32).reshape(64, 64).T.ravel()
    naive_values, naive = profiled_selftest("profile_transpose_naive")
    tiled_values, tiled = profiled_selftest("profile_transpose_tiled")
    np.testing.assert_array_equal(naive_values, expected)
    np.testing.assert_array_equal(tiled_values, expected)
    n, t = metrics(naive), metrics(tiled)
    assert n["load_sectors_per_request"] == 4 and t["load_sectors_per_request"] == 4
    # naive: the 32 lanes of a store request write 32 rows: one 32-byte sector each, 4 bytes used
    assert n["store_sectors_per_request"] == 32 and n["store_efficiency"] == 4 / 32
    assert t["store_sectors_per_request"] == 4 and t["store_efficiency"] == 1
    # the padded tile's column reads and row writes are conflict-free; one barrier per block
    assert t["shared_wavefronts_per_request"] == 1 and t["bank_conflict_share"] == 0
    assert tiled["counters"]["barriers"] == 4 and naive["counters"]["barriers"] == 0
    # both move the same bytes to and from DRAM: the naive one wastes sectors, not traffic
    for key in ("dram_read_sectors", "dram_write_sectors"):
        assert naive["counters"][key] == tiled["counters"][key] == 4096 * 4 // 32


def test_stride_32_shared_column_read_has_32_way_conflicts_and_padded_none():
    _, strided = profiled_selftest("profile_shared_stride32")
    values, padded = profiled_selftest("profile_shared_padded")
    t = np.arange(1024)
    np.testing.assert_array_equal(values, ((t % 32) * 32 + t // 32).astype(np.float32))
    s, p = strided["counters"], padded["counters"]
    assert s["shared_load_requests"] == 32 == p["shared_load_requests"]
    assert s["shared_load_wavefronts"] == 32 * 32  # every lane's word in one bank
    assert p["shared_load_wavefronts"] == 32
    assert s["shared_load_ideal_wavefronts"] == 32 == p["shared_load_ideal_wavefronts"]
    assert s["shared_store_wavefronts"] == 32 == p["shared_store_wavefronts"]  # rows: no conflict


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_matmul_tile_loads_coalesced_and_tiles_conflict_free_in_all_transpose_cases(
    trans_a, trans_b
):
    rng = np.random.default_rng(7)
    m, n, k = 128, 64, 96  # whole 64 x 64 x 16 tiles: every row starts on a sector boundary
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    ctx = gpumat.emu(0)
    ga, gb = gpumat.array(a, ctx), gpumat.array(b, ctx)
    gc = gpumat.array(np.full((m, n), np.nan, np.float32), ctx)
    with gprof.profile() as prof:
        ops.matmul(ga, gb, gc, trans_a, trans_b)
    ref = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
    np.testing.assert_allclose(gc.asnumpy(), ref, rtol=1e-4, atol=1e-4)
    (launch,) = prof.launches
    ta, tb = str(trans_a).lower(), str(trans_b).lower()
    assert launch["name"] == f"matmul_tiled_kernel<{ta},{tb},0,false>"
    mt = metrics(launch)
    assert mt["load_sectors_per_request"] == 4 and mt["load_efficiency"] == 1
    # a warp stores two rows of 16 floats: 2 x 64 bytes
    assert mt["store_sectors_per_request"] == 4 and mt["store_efficiency"] == 1
    assert mt["bank_conflict_share"] == 0
    assert launch["flops"] == 2 * m * n * k


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize(("m", "n", "k", "splits"), [(64, 64, 1024, 4), (100, 70, 1000, 3)])
def test_matmul_splits_k_when_its_tiles_cannot_fill_a_gpu(trans_a, trans_b, m, n, k, splits):
    # Few output tiles and a long k: grid.z chunks of k, the tile's last block adds them up (one
    # launch); the result is the same on every call (the tickets are reset) and matches float64.
    rng = np.random.default_rng(11)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    ctx = gpumat.emu(0)
    ga, gb = gpumat.array(a, ctx), gpumat.array(b, ctx)
    outs = []
    with gprof.profile() as prof:
        for _ in range(2):
            gc = gpumat.array(np.full((m, n), np.nan, np.float32), ctx)
            ops.matmul(ga, gb, gc, trans_a, trans_b)
            outs.append(gc.asnumpy())
    ref = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert [x["grid"][2] for x in prof.launches] == [splits, splits]  # and no second kernel
    ta, tb = str(trans_a).lower(), str(trans_b).lower()
    assert prof.launches[0]["name"] == f"matmul_tiled_kernel<{ta},{tb},0,true>"
    if m % 64 == 0 and k % 16 == 0:  # whole tiles: no lane skips a tile store
        assert gprof.derived(prof.launches[0]["counters"])["bank_conflict_share"] == 0


# ---------------------------------------------------------------------------- the profiler


def test_nothing_is_recorded_outside_a_profiler():
    _core._emu_profile_take()
    _core._emu_selftest("profile_copy", 0)
    gpumat.synchronize(gpumat.emu(0))
    assert not _core._emu_profile_enabled()
    assert _core._emu_profile_take() == []


def test_profilers_do_not_nest():
    with gprof.profile():
        with pytest.raises(RuntimeError, match="already active"):
            with gprof.profile():
                pass
    assert not _core._emu_profile_enabled()


def test_table_json_and_totals():
    with gprof.profile() as prof:
        _core._emu_selftest("profile_copy", 0)
        _core._emu_selftest("profile_copy", 0)
    (kernel,) = prof.kernels("H100")
    assert kernel["calls"] == 2 and kernel["counters"]["global_load_requests"] == 64
    table = prof.table("H100")
    assert "profile_copy_kernel" in table and "ESTIMATE" in table and "not a measurement" in table
    data = json.loads(json.dumps(prof.to_json("T4")))
    assert data["schema"] == "gpumat-profile/1" and "never measurements" in data["model"]["note"]
    totals = data["totals"]
    assert totals["dram_bytes"] == 2 * 2 * 4096  # each copy reads and writes 4 KiB once
    assert totals["floor_s"] == pytest.approx(2 * 2 * 4096 / 320e9)
    with pytest.raises(ValueError, match="unknown gpu"):
        prof.table("GTX 480")


def test_roofline_plot():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    rng = np.random.default_rng(3)
    ctx = gpumat.emu(0)
    a = gpumat.array(rng.standard_normal((64, 64)).astype(np.float32), ctx)
    c = gpumat.empty((64, 64), ctx)
    with gprof.profile() as prof:
        ops.matmul(a, a, c)
        _core._emu_selftest("profile_copy", 0)
    ax = prof.plot("A100")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("matmul_tiled_kernel" in t for t in labels)
    assert "1 kernels without FLOP counts" in ax.get_legend().get_title().get_text()
    matplotlib.pyplot.close(ax.figure)


def test_command_line(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import numpy as np
            import gpumat
            from gpumat import ops
            ctx = gpumat.emu(0)
            x = gpumat.array(np.random.default_rng(0).standard_normal((32, 32)).astype("f4"), ctx)
            y = gpumat.empty((32, 32), ctx)
            ops.relu(x, y)
            print("argv", sys.argv[1:])
            """
        )
    )
    out = tmp_path / "p.json"
    r = subprocess.run(
        [sys.executable, "-m", "gpumat.profile", "--gpu", "A100", "--json", str(out), str(script)]
        + ["--flag", "1"],
        cwd=tmp_path,  # never the source tree's gpumat
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "argv ['--flag', '1']" in r.stdout and "map_kernel<relu>" in r.stdout
    assert "NVIDIA A100" in r.stdout
    data = json.loads(out.read_text())
    assert [k["name"] for k in data["kernels"]] == ["map_kernel<relu>"]
    bad = subprocess.run(
        [sys.executable, "-m", "gpumat.profile", str(tmp_path / "missing.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and "no such script" in bad.stderr


# ---------------------------------------------------------------------------- occupancy, model


def test_occupancy_rules():
    # 256 threads = 8 warps; 64 registers: 2048 per warp, 32 warps fit: 4 blocks, half the SM
    assert gprof.occupancy(256, 64, 0, "H100") == {
        "blocks_per_sm": 4,
        "warps_per_sm": 32,
        "occupancy": 0.5,
        "limiter": "registers",
    }
    # 32 registers: 64 warps fit, so 8 blocks of 8 warps fill the SM
    assert gprof.occupancy(256, 32, 0, "A100")["occupancy"] == 1.0
    # 48 KiB of shared memory + 1 KiB reserved per block: 228 KiB / 49 KiB = 4 blocks
    occ = gprof.occupancy(128, 16, 48 * 1024, "H100")
    assert occ["blocks_per_sm"] == 4 and occ["limiter"] == "shared memory"
    # T4 (sm_75): 32 warps and 16 blocks per SM; 32-thread blocks are limited by the block count
    occ = gprof.occupancy(32, 16, 0, "T4")
    assert occ["blocks_per_sm"] == 16 and occ["occupancy"] == 0.5 and occ["limiter"] == "blocks"
    # 255 registers round to 8192 per warp: 8 warps fit
    assert gprof.occupancy(64, 255, 0, "H100")["warps_per_sm"] == 8
    for bad in [(0, 32, 0), (1025, 32, 0), (256, -1, 0), (256, 32, -4)]:
        with pytest.raises(ValueError, match="occupancy"):
            gprof.occupancy(*bad, "H100")


def test_kernel_resources_from_ptxas():
    for arch in ("sm_75", "sm_80", "sm_90"):
        res = gprof.kernel_resources(
            "gpumat::emu::matmul_tiled_kernel<false, true, 0, false>", arch
        )
        assert res is not None and res["match"] == "exact"
        assert 0 < res["registers"] <= 255
        assert res["static_smem_bytes"] == 2 * 16 * (64 + 2) * 4  # the two padded tiles
    lam = "gpumat::emu::map_kernel<gpumat::emu::relu(int, const float*, float*, int64_t)::"
    lam += "<lambda(int64_t)> >"
    assert gprof.short_name(lam) == "map_kernel<relu>"
    assert gprof.kernel_resources(lam, "sm_90")["match"] == "exact"
    assert gprof.kernel_resources("no_such_kernel", "sm_90") is None
    # kernels in an anonymous namespace, as the emulator names them (the fused attention's)
    for hd in (16, 32, 64, 128):
        for with_dq in ("false", "true"):
            name = f"gpumat::emu::(anonymous namespace)::attention_dkdv_kernel<{hd}, {with_dq}>"
            assert gprof.kernel_resources(name, "sm_90")["match"] == "exact", name


def test_ptxas_names_of_anonymous_namespace_kernels():
    from gpumat.cuda import _ptxas

    name = "void gpumat::cuda::(anonymous namespace)::attention_dq_kernel<128>(float const*, bool)"
    assert _ptxas.normalise(name) == "attention_dq_kernel<128>"
    assert _ptxas.normalise("gpumat::emu::k<(anonymous namespace)::Op, 1>") == "k<Op,1>"


def test_estimate_model():
    def launch(blocks, dram_sectors, flops):
        c = dict.fromkeys(gprof._SUMMED, 0)
        c.update(blocks=blocks, dram_read_sectors=dram_sectors)
        return {"counters": c, "flops": flops}

    h = gprof.GPUS["H100"]
    big = gprof.estimate(launch(10_000, 10**8, None), "H100")  # 3.2 GB
    assert big["bound"] == "memory" and big["time_s"] == pytest.approx(3.2e9 / h.dram_bytes_per_s)
    gemm = gprof.estimate(launch(10_000, 10**4, 1e12), "H100")
    assert gemm["bound"] == "compute" and gemm["time_s"] == pytest.approx(1e12 / 67e12)
    tiny = gprof.estimate(launch(1, 4, 8.0), "H100")
    assert tiny["bound"] == "latency" and tiny["time_s"] == h.launch_s
    # a grid of 33 blocks uses a quarter of the H100's 132 SMs: four times the bandwidth floor
    part = gprof.estimate(launch(33, 10**8, None), "H100")
    assert part["time_s"] == pytest.approx(4 * part["floor_s"])


def test_command_line_reports_a_script_that_exits(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text(
        "import sys\nimport numpy as np\nimport gpumat\nfrom gpumat import ops\n"
        "x = gpumat.array(np.ones((4, 4)), gpumat.emu(0))\n"
        "ops.relu(x, x)\nsys.exit(3)\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "gpumat.profile", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 3, r.stderr
    assert "map_kernel<relu>" in r.stdout and "RuntimeWarning" not in r.stderr


def test_command_line_reports_once_where_the_caller_asked(tmp_path):
    # A script that forks printed two tables (the child's counting the parent's launches); a
    # relative --json landed wherever the script chdir()ed; --top -1 dropped a row silently.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = tmp_path / "forks.py"
    script.write_text(
        "import os, sys\nimport numpy as np\nimport gpumat\nfrom gpumat import ops\n"
        "x = gpumat.array(np.ones((4, 4)), gpumat.emu(0))\n"
        "ops.relu(x, x)\ngpumat.synchronize(gpumat.emu(0))\n"
        f"os.chdir({str(elsewhere)!r})\n"
        "sys.stdout.flush()\n"
        "pid = os.fork()\n"
        "if pid:\n    os.waitpid(pid, 0)\n"
    )

    def profile_cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "gpumat.profile", *args, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    r = profile_cli("--json", "p.json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("map_kernel<relu>") == 1, r.stdout
    assert (tmp_path / "p.json").is_file() and not (elsewhere / "p.json").exists()
    bad = profile_cli("--top", "-1")
    assert bad.returncode == 2 and "--top must be >= 1" in bad.stderr
    with gprof.profile() as prof:
        ops.relu(gpumat.array(np.ones((4, 4)), gpumat.emu(0)), gpumat.empty((4, 4), gpumat.emu(0)))
    with pytest.raises(ValueError, match="top must be"):
        prof.table("H100", top=0)
