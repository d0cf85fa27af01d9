"""The C++ CPU kernels: built, picked by default, equal to the reference with
several threads, and a fallback that warns once when they are missing."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tolerances import TOL, assert_close

from pyg_dist.ops import backends, cpu, spmm, spmm_ref, to_csr
from pyg_dist.runtime import cpu_ext
from pyg_dist.testing import withCPUExtension

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_graph(num_rows, num_src, nnz, seed, hub=0):
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(1, num_rows - 1, (nnz,), generator=g)  # rows 0 and M-1 empty ...
    source = torch.randint(0, num_src, (nnz,), generator=g)
    target = torch.cat([target, torch.zeros(hub, dtype=torch.long)])  # ... unless row 0 is a hub
    source = torch.cat([source, torch.randint(0, num_src, (hub,), generator=g)])
    return to_csr(torch.stack([source, target]), num_rows)[:2]


def run_spmm(fn, rowptr, col, x, xh, value, reduce, grad):
    inputs = [x, xh, value]
    out = fn(rowptr, col, x, value, reduce, xh)
    return (out, *torch.autograd.grad(out, inputs, grad))


def test_extension_builds_where_a_compiler_is():
    reason = cpu_ext._why_not_buildable()
    if reason:
        pytest.skip(f"nothing to build with: {reason}")
    assert cpu.is_available(), cpu.unavailable_reason()
    assert cpu.unavailable_reason() == ""
    assert cpu.source_dir() is not None


@withCPUExtension
def test_default_backend_for_cpu_tensors_is_the_extension():
    rowptr, col = make_graph(20, 20, 60, seed=0)
    x = torch.randn(20, 4)
    assert backends.resolve(None, x).name == "cpu"
    assert backends.available_backends("cpu")[0] == "cpu"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = spmm(rowptr, col, x)
    assert any(event.name == "pyg_dist::spmm_forward" for event in prof.events())
    assert_close(out, spmm_ref(rowptr, col, x))


@withCPUExtension
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("feats", [33, 130])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_two_threads_match_ref_and_one_thread(reduce, feats, index_dtype):
    # (entries + rows) * F is well above the kernels' grain, so the rows are
    # split into many tasks; row 0 is a hub of 3000 entries.
    rowptr, col = make_graph(2000, 3000, 30000, seed=feats, hub=3000)
    rowptr, col = rowptr.to(index_dtype), col.to(index_dtype)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2400, feats, generator=g).requires_grad_()
    xh = torch.randn(600, feats, generator=g).requires_grad_()
    value = torch.rand(col.numel(), generator=g).requires_grad_()
    grad = torch.randn(2000, feats, generator=g)

    def ours(*args):
        return spmm(*args, backend="cpu")

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = run_spmm(ours, rowptr, col, x, xh, value, reduce, grad)
        torch.set_num_threads(1)
        one = run_spmm(ours, rowptr, col, x, xh, value, reduce, grad)
    finally:
        torch.set_num_threads(threads)
    ref = run_spmm(spmm_ref, rowptr, col, x, xh, value, reduce, grad)
    for name, a, b, c in zip(("out", "grad_x", "grad_halo", "grad_value"), two, ref, one):
        assert_close(a, b, torch.float32, f"{reduce}/F={feats} {name}")
        assert torch.equal(a, c), f"{reduce}/F={feats} {name} depends on the thread count"


@withCPUExtension
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_two_threads_half_precision(dtype):
    rowptr, col = make_graph(1000, 1000, 20000, seed=7, hub=2000)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1000, 72, generator=g).to(dtype).requires_grad_()
    value = torch.rand(col.numel(), generator=g).to(dtype)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        out = spmm(rowptr, col, x, value, backend="cpu")
        (grad_x,) = torch.autograd.grad(out, [x], torch.ones_like(out))
    finally:
        torch.set_num_threads(threads)
    ref = spmm_ref(rowptr, col, x, value)
    (ref_grad_x,) = torch.autograd.grad(ref, [x], torch.ones_like(ref))
    assert out.dtype == dtype and grad_x.dtype == dtype
    assert_close(out, ref, dtype, "out")
    assert_close(grad_x, ref_grad_x, dtype, "grad_x")
    assert dtype in TOL


@withCPUExtension
def test_max_picks_the_first_entry_among_ties_and_infinities():
    # row 0: three copies of source 0 (ties); row 1: only -inf; row 2: empty
    rowptr = torch.tensor([0, 3, 5, 5])
    col = torch.tensor([0, 0, 0, 1, 1])
    x = torch.tensor([[1.0, -2.0], [float("-inf"), float("-inf")]], requires_grad=True)
    out = spmm(rowptr, col, x, reduce="max", backend="cpu")
    _, arg = torch.ops.pyg_dist.spmm_forward(rowptr, col, None, x.detach(), None, "max")
    assert arg.tolist() == [[0, 0], [3, 3], [5, 5]]
    ref = spmm_ref(rowptr, col, x, reduce="max")
    assert torch.equal(out, ref)
    grad = torch.autograd.grad(out, x, torch.ones_like(out))[0]
    assert torch.equal(grad, torch.autograd.grad(ref, x, torch.ones_like(ref))[0])


def test_with_cpu_ext_flag_matches_the_loader():
    from pyg_dist import typing as pyg_dist_typing

    assert pyg_dist_typing.WITH_CPU_EXT is cpu.is_available()


@withCPUExtension
def test_kernel_errors_name_the_fix():
    rowptr, col = make_graph(10, 10, 30, seed=3)
    x = torch.randn(10, 3)
    with pytest.raises(RuntimeError, match=r"column index outside \[0, 10\)"):
        spmm(rowptr, torch.full_like(col, 10), x, backend="cpu")
    with pytest.raises(RuntimeError, match="int32 or int64"):
        torch.ops.pyg_dist.spmm_forward(rowptr.int(), col, None, x, None, "sum")
    with pytest.raises(RuntimeError, match="to_csr"):
        torch.ops.pyg_dist.spmm_forward(rowptr.flip(0), col, None, x, None, "sum")
    with pytest.raises(RuntimeError, match="use one of sum, mean, max"):
        torch.ops.pyg_dist.spmm_forward(rowptr, col, None, x, None, "min")


FALLBACK_SCRIPT = textwrap.dedent(
    """
    import json, warnings
    import torch
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        from pyg_dist.ops import available_backends, spmm, spmm_ref, to_csr
        ei = torch.randint(0, 30, (2, 200), generator=torch.Generator().manual_seed(0))
        rowptr, col, _ = to_csr(ei, 30)
        x = torch.randn(30, 5, requires_grad=True)
        errs = []
        for reduce in ("sum", "mean", "max"):
            out = spmm(rowptr, col, x, reduce=reduce)
            ref = spmm_ref(rowptr, col, x, reduce=reduce)
            errs.append((out - ref).abs().max().item())
            errs.append((torch.autograd.grad(out.sum(), x)[0]
                         - torch.autograd.grad(ref.sum(), x)[0]).abs().max().item())
        names = available_backends("cpu")
        try:
            spmm(rowptr, col, x, backend="cpu")
            forced = ""
        except RuntimeError as exc:
            forced = str(exc)
    ours = [str(w.message) for w in caught if "C++ CPU kernels" in str(w.message)]
    print(json.dumps({"warnings": ours, "errs": errs, "backends": names, "forced": forced}))
    """
)


def run_fallback(tmp_path, **env):
    environ = {key: value for key, value in os.environ.items()
               if key not in (cpu.DISABLE_ENV, "TRITON_INTERPRET")}
    environ.update(PYTHONPATH=REPO, TORCH_EXTENSIONS_DIR=str(tmp_path), **env)
    proc = subprocess.run([sys.executable, "-c", FALLBACK_SCRIPT], env=environ, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env,reason", [
    ({cpu.DISABLE_ENV: "1"}, "disabled by PYG_DIST_DISABLE_CPU_EXT=1"),
    ({"CXX": "/nonexistent/c++"}, "no C++ compiler '/nonexistent/c++'"),
])
def test_fallback_warns_once_and_stays_correct(tmp_path, env, reason):
    result = run_fallback(tmp_path, **env)
    assert len(result["warnings"]) == 1, result["warnings"]
    assert reason in result["warnings"][0]
    assert max(result["errs"]) < 1e-5
    assert result["backends"] == ["torch"]
    assert reason in result["forced"] and "backend='torch'" in result["forced"]


def test_failed_build_warns_with_the_compiler_output(tmp_path):
    compiler = tmp_path / "broken-c++"
    compiler.write_text("#!/bin/sh\necho 'broken-c++: this compiler always fails' >&2\nexit 1\n")
    compiler.chmod(0o755)
    reason = (cpu_ext._why_not_buildable()
              or ("needs a POSIX shell" if sys.platform == "win32" else ""))
    if reason:
        pytest.skip(f"nothing to build with: {reason}")
    result = run_fallback(tmp_path, CXX=str(compiler))
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "the build failed" in result["warnings"][0]
    assert max(result["errs"]) < 1e-5


def test_a_lock_left_by_a_killed_build_is_removed(tmp_path, monkeypatch):
    """A build killed midway leaves cpp_extension's lock file behind: a stale
    one is removed with a warning, a fresh one is waited for."""
    import threading
    import time

    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "_get_build_directory", lambda name, verbose: str(tmp_path))
    lock = tmp_path / "lock"
    lock.touch()
    old = time.time() - cpu_ext.STALE_LOCK_SECONDS - 60
    os.utime(lock, (old, old))
    with pytest.warns(RuntimeWarning, match="removing the lock of a C.. build"):
        cpu_ext._wait_for_build("any")
    assert not lock.exists()

    lock.touch()  # a build in progress: its process removes the lock when done
    threading.Timer(0.5, lock.unlink).start()
    start = time.monotonic()
    cpu_ext._wait_for_build("any")
    assert not lock.exists() and time.monotonic() - start >= 0.4


@pytest.fixture
def fake_compile(tmp_path, monkeypatch, capsys):
    """``cpp_extension.load`` replaced by one that writes the library file
    into an empty extensions cache (``tmp_path``); returns, per compile, the
    extension's name and what stderr said before it started. It writes the
    library only where there is none, as ninja leaves an up-to-date build."""
    from torch.utils import cpp_extension

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    calls = []

    def load(name, **kwargs):  # as ninja does: an up-to-date library is left as it is
        calls.append((name, capsys.readouterr().err))
        library = tmp_path / name / (name + cpp_extension.LIB_EXT)
        if not library.is_file():
            library.write_text("a library")

    monkeypatch.setattr(cpp_extension, "load", load)
    return calls


def test_the_build_runs_the_environments_ninja(tmp_path, monkeypatch):
    """Another ninja first on PATH (a system one of another version) is not
    the one the build runs: two versions sharing a build folder rebuilt the
    kernels from scratch at every switch. PATH is the caller's again after."""
    import ninja
    from torch.utils import cpp_extension

    other = tmp_path / "bin"
    other.mkdir()
    (other / "ninja").write_text("#!/bin/sh\necho 1.0.0\n")
    (other / "ninja").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache"))
    seen = []

    def load(name, **kwargs):
        seen.append(shutil.which("ninja"))

    monkeypatch.setattr(cpp_extension, "load", load)
    cpu_ext._build_and_load()
    assert seen == [str(Path(ninja.BIN_DIR) / "ninja")]
    assert shutil.which("ninja") == str(other / "ninja")


def test_a_first_use_compile_says_so_once_before_it_starts(fake_compile, capsys):
    assert cpu_ext._build_and_load().origin == "compiled"
    ((_, said),) = fake_compile
    assert said.count(cpu_ext.COMPILE_MESSAGE) == 1, said
    assert cpu_ext.COMPILE_MESSAGE == "compiling pyg_dist's CPU kernels once, about a minute"
    assert cpu_ext._build_and_load().origin == "cached"
    assert cpu_ext.COMPILE_MESSAGE not in fake_compile[1][1] + capsys.readouterr().err


def test_ranks_that_compile_together_say_so_once(fake_compile, tmp_path):
    """Another process compiling the same extension has said it (its marker
    is fresh); a marker left by a killed compile is stale."""
    import time

    from torch.utils import cpp_extension

    cpu_ext._build_and_load()
    name = fake_compile[0][0]
    library = tmp_path / name / (name + cpp_extension.LIB_EXT)
    marker = tmp_path / name / "announced"
    assert not marker.exists(), "the marker outlived the compile"
    library.unlink()
    marker.touch()  # another rank compiles now
    cpu_ext._build_and_load()
    assert cpu_ext.COMPILE_MESSAGE not in fake_compile[1][1]
    assert marker.exists(), "the other rank's marker is its own to remove"

    library.unlink()
    old = time.time() - cpu_ext.STALE_LOCK_SECONDS - 60
    os.utime(marker, (old, old))
    cpu_ext._build_and_load()
    assert fake_compile[2][1].count(cpu_ext.COMPILE_MESSAGE) == 1
    assert not marker.exists()


@pytest.mark.parametrize("built_for,cause", [
    (torch.__version__, "loading not_a_library.so failed"),
    ("2.4.0+cpu", "they were built for torch 2.4.0+cpu"),
])
def test_a_prebuilt_library_that_does_not_load_is_compiled_instead(tmp_path, monkeypatch,
                                                                   built_for, cause):
    library = tmp_path / "not_a_library.so"
    library.write_text("not an ELF file")
    loaded, load_library = [], torch.ops.load_library
    monkeypatch.setattr(torch.ops, "load_library",
                        lambda path: loaded.append(path) or load_library(path))
    monkeypatch.delenv(cpu.DISABLE_ENV, raising=False)
    monkeypatch.setattr(cpu_ext, "_find_prebuilt", lambda: cpu_ext._Prebuilt(library, built_for))
    monkeypatch.setattr(cpu_ext, "_why_not_buildable", lambda: "")
    monkeypatch.setattr(cpu_ext, "_build_and_load", lambda: cpu_ext._LoadResult("compiled"))
    with pytest.warns(RuntimeWarning) as caught:
        result = cpu_ext._load.__wrapped__()
    assert result.origin == "compiled"
    (message,) = [str(w.message) for w in caught]
    assert cause in message, message
    assert "compiling them from source" in message
    assert f"Reinstall the pyg-dist wheel built for your torch {torch.__version__}" in message
    assert len(loaded) == (1 if built_for == torch.__version__ else 0)


def test_a_prebuilt_library_that_loads_is_used_without_compiling(monkeypatch, tmp_path):
    library = tmp_path / "_cpu_kernels_avx2.so"
    loaded = []
    monkeypatch.delenv(cpu.DISABLE_ENV, raising=False)
    monkeypatch.setattr(cpu_ext, "_find_prebuilt",
                        lambda: cpu_ext._Prebuilt(library, torch.__version__))
    monkeypatch.setattr(torch.ops, "load_library", loaded.append)
    monkeypatch.setattr(cpu_ext, "_build_and_load", lambda: pytest.fail("compiled"))
    result = cpu_ext._load.__wrapped__()
    assert (result.origin, result.library, result.reason) == ("prebuilt", library, "")
    assert loaded == [str(library)]


def test_each_environment_has_its_own_build(fake_compile, monkeypatch, capsys):
    """One clone used from two virtual environments (a notebook kernel's and
    a shell's, each with its own torch): each compiles once, into a build of
    its own, and switching back compiles nothing."""
    def use(env):
        monkeypatch.setattr(torch, "__file__", f"/{env}/lib/site-packages/torch/__init__.py")
        return cpu_ext._build_and_load().origin

    assert [use("notebook-env"), use("shell-env"), use("notebook-env"), use("shell-env")] == [
        "compiled", "compiled", "cached", "cached"]
    first, second = fake_compile[0][0], fake_compile[1][0]
    assert first != second and len(fake_compile) == 4
    assert fake_compile[2][0] == first and fake_compile[3][0] == second
    said = capsys.readouterr().err + "".join(err for _, err in fake_compile)
    assert said.count(cpu_ext.COMPILE_MESSAGE) == 2, said
    assert said.count("compiled pyg_dist's CPU kernels in ") == 2, said


def test_the_build_key_names_the_environment(monkeypatch, tmp_path):
    source = tmp_path / "spmm.cpp"
    source.write_text("// a kernel")

    def key(torch_file):
        monkeypatch.setattr(torch, "__file__", torch_file)
        return cpu_ext._build_key([source], ["-O3"])

    venv = "/home/u/proj/.venv/lib/python3.11/site-packages/torch/__init__.py"
    conda = "/opt/conda/envs/gnn/lib/python3.11/site-packages/torch/__init__.py"
    assert key(venv) != key(conda)
    assert key(venv) == key(venv)
    assert cpu_ext.environment() == os.path.dirname(venv)


def test_an_environment_reached_through_a_link_builds_apart(monkeypatch, tmp_path):
    """torch's build names its headers by the path torch was imported from:
    one environment reached through a symbolic link (a clone's ``.venv``
    linking to another) and directly must not share a build's name, or each
    rebuilds the other's kernels."""
    source = tmp_path / "spmm.cpp"
    source.write_text("// a kernel")
    real = tmp_path / "real" / "lib" / "site-packages" / "torch"
    real.mkdir(parents=True)
    (tmp_path / "linked").symlink_to(tmp_path / "real", target_is_directory=True)

    def key(root):
        monkeypatch.setattr(torch, "__file__", str(tmp_path / root / "lib" / "site-packages"
                                                   / "torch" / "__init__.py"))
        return cpu_ext._build_key([source], ["-O3"])

    assert key("linked") != key("real")
    assert key("linked") == key("linked")


def test_a_cached_build_that_ninja_rebuilds_is_said_once(fake_compile, tmp_path, monkeypatch,
                                                         capsys):
    """A cached library that the build rewrites (torch's headers changed in
    place) was compiled: said after it, once, by the first of the ranks that
    saw it rewritten."""
    from torch.utils import cpp_extension

    cpu_ext._build_and_load()
    name = fake_compile[0][0]
    library = tmp_path / name / (name + cpp_extension.LIB_EXT)
    os.utime(library, (1, 1))
    capsys.readouterr()

    def rebuild(name, **kwargs):  # the ranks' loads: one compiles, the others wait for it
        os.utime(library, (2, 2))

    monkeypatch.setattr(cpp_extension, "load", rebuild)
    origins = []
    for _ in range(2):  # two ranks that started together
        os.utime(library, (1, 1))
        origins.append(cpu_ext._build_and_load().origin)
    assert origins == ["compiled", "compiled"]
    said = capsys.readouterr().err
    assert said.count("compiled pyg_dist's CPU kernels in ") == 1, said
