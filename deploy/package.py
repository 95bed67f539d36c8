"""Build the zip Terraform uploads as the functions' source.

The zip holds ``main.py`` (a copy of ``functions/main.py``) at its root, the
``shared`` package beside it, and the repo's ``requirements.txt``: exactly what
Cloud Functions builds from. It is reproducible (sorted entries, fixed
timestamps and modes), so its SHA-256 changes exactly when its content does;
Terraform names the uploaded object after that hash, so a code change
redeploys and an unchanged tree does not.

Run ``python -m deploy.package`` (``make package``): it writes
``build/function-source.zip`` and keeps a copy named by hash for rollback.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHIVE_NAME = "function-source.zip"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest timestamp a zip can hold
_SKIP_DIRS = frozenset({"__pycache__"})
_SKIP_SUFFIXES = frozenset({".pyc", ".pyo"})


@dataclass(frozen=True)
class Package:
    path: Path
    sha256: str
    entries: tuple[str, ...]


def source_files(root: Path = ROOT) -> dict[str, Path]:
    """Archive name -> file on disk, for everything the functions deploy with."""
    files = {"main.py": root / "functions" / "main.py", "requirements.txt": root / "requirements.txt"}
    shared = root / "shared"
    for path in sorted(shared.rglob("*")):
        relative = path.relative_to(root)
        if path.is_dir() or _SKIP_DIRS.intersection(relative.parts) or path.suffix in _SKIP_SUFFIXES:
            continue
        files[relative.as_posix()] = path
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"cannot package, missing: {', '.join(missing)}")
    return files


def build(out_dir: Path, root: Path = ROOT) -> Package:
    """Write ``out_dir/function-source.zip`` reproducibly; returns its path, hash and entries."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / ARCHIVE_NAME
    partial = target.with_suffix(".zip.partial")
    files = source_files(root)
    with zipfile.ZipFile(partial, "w") as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name].read_bytes(), compresslevel=9)
    partial.replace(target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    return Package(path=target, sha256=digest, entries=tuple(sorted(files)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "build", help="output directory (default: build/)")
    args = parser.parse_args(argv)
    package = build(args.out)
    # A copy per content hash: `terraform apply -var source_archive=...` redeploys it (rollback).
    keep = package.path.with_name(f"function-source-{package.sha256[:12]}.zip")
    shutil.copyfile(package.path, keep)
    print(f"{package.path} sha256={package.sha256} ({len(package.entries)} files; copy: {keep.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
