"""What the code index leaves out of a project, and why: the rules `mneme.code.scan` walks by.

- `.gitignore` files, at the root and in any directory below it, with git's own semantics (pathspec's
  `GitIgnoreSpec`: the deepest file that matches decides, the last matching line in it wins, `!` re-includes),
  plus `.git/info/exclude`. An ignored directory is not entered, as in git.
- Default ignores, wherever they are: version control and tool caches (.git, .hg, .svn, __pycache__, .venv,
  venv, .tox, .nox, .mypy_cache, .pytest_cache, .ruff_cache, .hypothesis), dependencies (node_modules,
  bower_components, vendor, third_party), build output (build, dist, target, out, .next, .nuxt, .gradle,
  *.egg-info) and lock files.
- Binary files: a known binary extension, or a NUL byte in the first 8 KiB.
- Minified files: `.min.js`/`.min.css`/`.map` names, or a head (first 8 KiB) of 1 KiB or more averaging over
  200 characters a line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec

HEAD_BYTES = 8192

IGNORED_DIRS = frozenset(
    """.git .hg .svn .bzr __pycache__ .venv venv .tox .nox .mypy_cache .pytest_cache .ruff_cache .hypothesis
    .eggs .cache node_modules bower_components jspm_packages vendor third_party build dist target out .next .nuxt
    .svelte-kit .parcel-cache .gradle .terraform htmlcov coverage .coverage_html .idea""".split()
)
IGNORED_FILES = frozenset(
    """package-lock.json yarn.lock pnpm-lock.yaml npm-shrinkwrap.json Cargo.lock poetry.lock uv.lock Pipfile.lock
    go.sum composer.lock Gemfile.lock .DS_Store Thumbs.db""".split()
)
BINARY_EXTENSIONS = frozenset(
    """png jpg jpeg gif bmp ico icns webp tif tiff psd svgz pdf zip gz tgz bz2 xz zst 7z rar tar jar war ear class
    o a so dylib dll exe lib obj pdb bin dat pyc pyo pyd whl egg woff woff2 ttf otf eot mp3 mp4 m4a wav ogg flac
    avi mov mkv webm sqlite sqlite3 db duckdb wal onnx pt pth ckpt safetensors npy npz pkl pickle parquet arrow
    feather h5 hdf5 wasm iso dmg img deb rpm apk""".split()
)
MINIFIED_SUFFIXES = (".min.js", ".min.css", ".min.mjs", ".js.map", ".css.map", ".map")


def ignored_dir(name: str) -> bool:
    return name in IGNORED_DIRS or name.endswith(".egg-info")


def ignored_file(name: str) -> bool:
    return name in IGNORED_FILES


def binary_name(name: str) -> bool:
    dot = name.rfind(".")
    return dot > 0 and name[dot + 1 :].lower() in BINARY_EXTENSIONS


def binary_head(head: bytes) -> bool:
    return b"\0" in head[:HEAD_BYTES]


def minified(name: str, head: bytes) -> bool:
    if name.lower().endswith(MINIFIED_SUFFIXES):
        return True
    if len(head) < 1024:
        return False
    return len(head) / (head.count(b"\n") + 1) > 200


@dataclass(frozen=True)
class _Rules:
    base: str  # the directory of the .gitignore, relative to the root ("" for the root), POSIX
    spec: GitIgnoreSpec


@dataclass
class GitIgnores:
    """The .gitignore rules in force in one directory: its own file's and every ancestor's, deepest last."""

    rules: tuple[_Rules, ...] = field(default_factory=tuple)

    @classmethod
    def at_root(cls, root: Path) -> GitIgnores:
        found = cls()
        exclude = root / ".git" / "info" / "exclude"
        found = found._with("", exclude)
        return found._with("", root / ".gitignore")

    def entering(self, directory: Path, rel: str) -> GitIgnores:
        """The rules inside `directory` (at `rel` from the root): these plus its own .gitignore, if any."""
        return self._with(rel, directory / ".gitignore")

    def _with(self, base: str, path: Path) -> GitIgnores:
        try:
            lines = path.read_text("utf-8", errors="replace").splitlines()
        except OSError:  # none, or unreadable: no rules from it
            return self
        spec = GitIgnoreSpec.from_lines(lines)
        return GitIgnores((*self.rules, _Rules(base, spec))) if len(spec) else self

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether git would ignore the file or directory at `rel` (relative to the root, POSIX)."""
        for rules in reversed(self.rules):
            local = rel[len(rules.base) + 1 :] if rules.base else rel
            verdict = rules.spec.check_file(local + "/" if is_dir else local).include
            if verdict is not None:
                return verdict
        return False
