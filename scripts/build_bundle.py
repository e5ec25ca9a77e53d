"""Build the one deployable function bundle: dist/bundle-<sha256[:16]>.zip.

Contents (what Cloud Run functions' Python buildpack expects at the source root):
  main.py            copy of functions/main.py (every entry point named in the topology)
  rlcleanup/...      the shared package (shared/rlcleanup, without caches)
  requirements.txt   functions/requirements.lock: every package the functions import, `==`-pinned with hashes
                     (compiled from pyproject.toml [project].dependencies by `make lock`; `make setup` installs
                     the same lock, so the suite runs against exactly what is deployed)

The archive is deterministic (sorted entries, fixed timestamps and permissions), so the same content always gets
the same name and Terraform does not redeploy an unchanged bundle. Prints the bundle path.

    python scripts/build_bundle.py [--main functions/main.py] [--out-dir dist]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "shared" / "rlcleanup"
LOCK = ROOT / "functions" / "requirements.lock"
EXCLUDED_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
EXCLUDED_SUFFIXES = {".pyc", ".pyo"}
FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def runtime_requirements(lock: Path = LOCK) -> str:
    """requirements.txt text: the hash-pinned lock, as it is (open ranges would resolve anew at every deploy)."""
    if not lock.is_file():
        raise FileNotFoundError(f"{lock} does not exist: run `make lock`")
    return lock.read_text(encoding="utf-8")


def declared_dependencies(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """[project].dependencies as declared (what the lock is compiled from)."""
    deps: list[str] = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    return deps


def package_files(package_dir: Path = PACKAGE_DIR) -> dict[str, bytes]:
    """Archive name -> bytes for every file of the package, skipping caches and bytecode."""
    files: dict[str, bytes] = {}
    for path in package_dir.rglob("*"):
        rel = path.relative_to(package_dir.parent)
        if not path.is_file() or EXCLUDED_DIRS.intersection(rel.parts) or path.suffix in EXCLUDED_SUFFIXES:
            continue
        files[rel.as_posix()] = path.read_bytes()
    return files


def bundle_bytes(main_py: Path) -> bytes:
    """The zip archive as bytes; identical inputs give identical bytes."""
    entries = {"main.py": main_py.read_bytes(), "requirements.txt": runtime_requirements().encode(), **package_files()}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
            info.create_system = 3  # unix, so external_attr means the same everywhere
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, entries[name], compresslevel=9)
    return buf.getvalue()


def build(main_py: Path, out_dir: Path) -> Path:
    """Write the bundle to out_dir/bundle-<sha256[:16]>.zip and return its path."""
    if not main_py.is_file():
        raise FileNotFoundError(f"{main_py} does not exist: the bundle needs the functions' main.py")
    data = bundle_bytes(main_py)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"bundle-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    tmp = target.with_suffix(".zip.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--main", type=Path, default=ROOT / "functions" / "main.py", help="the entry-point module")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "dist", help="where to write the bundle")
    args = parser.parse_args(argv)
    try:
        path = build(args.main, args.out_dir)
    except FileNotFoundError as exc:
        print(f"build_bundle: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
