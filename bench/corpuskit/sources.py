"""Where the corpus files come from: a transformers source tree, a wheel read in place, or a release fetched with
``pip download --no-deps transformers==X`` into a cache folder (never into the repository)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

# transformers/models/<model>/modeling_<x>.py and transformers/models/deprecated/<model>/modeling_<x>.py
MODELING = re.compile(r"(?:^|/)transformers/(models/(?:deprecated/)?([^/]+)/(modeling_[^/]+\.py))$")
FRAMEWORK = re.compile(r"modeling_(?:tf|flax)_")
VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.M)
CACHE = Path(os.environ.get("CACHEMIGRATE_CORPUS_CACHE", Path.home() / ".cache" / "cachemigrate" / "corpus"))


@dataclasses.dataclass(frozen=True)
class CorpusFile:
    version: str  # the transformers release the file comes from
    relative: str  # models/<model>/modeling_<x>.py, as in the release
    model: str  # the model folder name
    data: bytes = dataclasses.field(repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.relative.rsplit("/", 1)[1]

    @property
    def package(self) -> str:
        """The package the file lives in, in its own release (``transformers.models.deprecated.open_llama``)."""
        return "transformers." + self.relative.rsplit("/", 1)[0].replace("/", ".")

    @property
    def framework(self) -> bool:
        """A TensorFlow or Flax file: skipped, as the command line skips them by default."""
        return bool(FRAMEWORK.match(self.name))


def installed_transformers() -> Path:
    spec = importlib.util.find_spec("transformers")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("transformers is not installed: name a tree or a wheel")
    return Path(list(spec.submodule_search_locations)[0])


def fetch(version: str, cache: Path = CACHE) -> Path:
    """The wheel of ``transformers==version``, downloaded once into ``cache`` with pip (no dependencies)."""
    found = sorted(cache.glob(f"transformers-{version}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        f"transformers=={version}",
        "-d",
        str(cache),
    ]
    subprocess.run(command, check=True)
    found = sorted(cache.glob(f"transformers-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download did not give a wheel of transformers {version} in {cache}")
    return found[0]


def read_source(source: Path) -> tuple[str, list[CorpusFile]]:
    """(release, its PyTorch and TF/Flax modeling files) of a source tree (the package folder or one above) or
    a wheel."""
    entries: dict[str, bytes] = {}
    version = None
    if source.is_file():
        with zipfile.ZipFile(source) as archive:
            for name in sorted(archive.namelist()):
                if MODELING.search(name):
                    entries[name] = archive.read(name)
                elif re.search(r"(?:^|/)transformers/__init__\.py$", name):  # not switch_transformers/...
                    version = _version(archive.read(name).decode())
    elif _remote_folders(source):
        return _read_remote(source)
    else:
        package = source if (source / "models").is_dir() else source / "transformers"
        if not (package / "models").is_dir():
            raise SystemExit(f"{source}: not a transformers source tree (no models/ folder)")
        init = package / "__init__.py"
        version = _version(init.read_text()) if init.is_file() else None
        for path in sorted(package.glob("models/**/modeling_*.py")):
            name = f"transformers/{path.relative_to(package).as_posix()}"
            if MODELING.search(name):
                entries[name] = path.read_bytes()
    version = version or source.name
    files = []
    for name, data in entries.items():
        match = MODELING.search(name)
        files.append(CorpusFile(version, match.group(1), match.group(2), data))
    return version, files


def _remote_folders(source: Path) -> list[Path]:
    """The remote-code folders of ``source`` (``fixtures/remote``): subfolders holding a ``modeling_*.py``, in a
    folder that is not a transformers tree."""
    if not source.is_dir() or (source / "models").is_dir() or (source / "transformers").is_dir():
        return []
    return sorted(folder for folder in source.iterdir() if folder.is_dir() and any(folder.glob("modeling_*.py")))


def _read_remote(source: Path) -> tuple[str, list[CorpusFile]]:
    """Remote-code folders as a corpus: the folder's name is the release column, each subfolder a model."""
    files = [
        CorpusFile(source.name, f"{folder.name}/{path.name}", folder.name, path.read_bytes())
        for folder in _remote_folders(source)
        for path in sorted(folder.glob("modeling_*.py"))
    ]
    return source.name, files


def _version(init: str) -> str | None:
    match = VERSION.search(init)
    return match.group(1) if match else None


def resolve(spec: str) -> Path:
    """A source on the command line: a path, ``installed``, or a release number to fetch (``4.35.2``)."""
    if spec == "installed":
        return installed_transformers()
    path = Path(spec)
    if path.exists():
        return path
    if re.fullmatch(r"\d+\.\d+(\.\d+)?(\.\w+)?", spec):
        return fetch(spec)
    raise SystemExit(f"{spec}: no such file or folder, and not a release number to fetch")
