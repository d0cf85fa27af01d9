"""The binary wheel against a source install: what a first run costs.

    python benchmarks/binary_wheel.py [--json out.json]

Builds the wheel with ``scripts/build_wheel.sh`` (from this checkout, timed),
installs it without its dependencies into a fresh virtual environment that
borrows them from this one (as ``tests/test_wheel.py`` does), and times one
epoch of the demo's graph end to end (cut included)::

    pyg-dist train --dataset synthetic --parts 4 --model gcn --epochs 1 --no-progress

three times: from the wheel with an empty ``$TORCH_EXTENSIONS_DIR``; from this
environment's source install with an empty one (the C++ kernels compile
once); from the source install again with that cache. Each run reports its
seconds, how often its ranks said they were compiling, and what the cache
holds after it; the wheel's run also the library its process loaded.

Not a test: the seconds depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMAND = ["train", "--dataset", "synthetic", "--parts", "4", "--model", "gcn", "--epochs",
           "1", "--no-progress"]
PROBE = ("from pyg_dist.runtime import cpu_ext; "
         "print(cpu_ext.kernels_origin(), cpu_ext.kernels_library().name)")


def build(out: Path) -> dict:
    """The wheel, built from this checkout, with its size and libraries."""
    start = time.perf_counter()
    proc = subprocess.run(["bash", "scripts/build_wheel.sh", str(out)], cwd=REPO,
                          env={**os.environ, "PYTHON": sys.executable}, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"scripts/build_wheel.sh failed:\n{proc.stderr[-4000:]}")
    wheel = next(out.glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        libraries = {Path(i.filename).name: i.file_size for i in archive.infolist()
                     if i.filename.endswith(".so")}
    return {"wheel": wheel.name, "path": str(wheel), "bytes": wheel.stat().st_size,
            "build_s": seconds, "libraries": libraries}


def fresh_venv(wheel: str, root: Path) -> Path:
    """A virtual environment holding the wheel alone; a ``.pth`` line
    borrows every dependency from this environment."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--no-deps", "--no-index", "--quiet", "--disable-pip-version-check", wheel],
                   check=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; "
                           "print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "borrowed_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root / "bin"


def first_run(name: str, bin_dir: Path, cache: Path, work: Path) -> dict:
    """The demo's command from ``bin_dir``, timed end to end, in ``work``
    with ``cache`` as the torch extensions folder."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(cache)}
    env.pop("PYTHONPATH", None)
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    proc = subprocess.run([str(bin_dir / "pyg-dist"), *COMMAND], cwd=work, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{name}: pyg-dist exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    said = sum("compiling pyg_dist's CPU kernels" in line for line in proc.stderr.splitlines())
    row = {"install": name, "seconds": seconds, "said_compiling": said,
           "cache": sorted(os.listdir(cache))}
    if name == "wheel":
        probe = subprocess.run([str(bin_dir / "python"), "-c", PROBE], cwd=work, env=env,
                               capture_output=True, text=True, check=True)
        row["origin"], row["library"] = probe.stdout.split()
    print(f"{name:<14} {seconds:6.1f} s  said compiling {said}x  cache {row['cache']}"
          + (f"  {row['origin']} {row['library']}" if name == "wheel" else ""), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="also write the build and the runs to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pyg_dist-wheel-") as tmp:
        root = Path(tmp)
        built = build(root / "dist")
        print(f"{built['wheel']}: {built['bytes'] / 1024:.0f} KiB, built in "
              f"{built['build_s']:.0f} s; libraries "
              + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in built["libraries"].items()),
              flush=True)
        wheel_bin = fresh_venv(built["path"], root / "venv")
        for cache in ("wheel-cache", "source-cache"):
            (root / cache).mkdir()
        source_bin = Path(sysconfig.get_path("scripts"))
        runs = [first_run("wheel", wheel_bin, root / "wheel-cache", root / "w"),
                first_run("source", source_bin, root / "source-cache", root / "s1"),
                first_run("source, cached", source_bin, root / "source-cache", root / "s2")]
    if args.json:
        del built["path"]
        Path(args.json).write_text(json.dumps({"build": built, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
