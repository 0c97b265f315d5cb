"""The code index's scanner (mneme/code/scan.py, ignore.py): path validation errors, .gitignore and default
ignores, binary, minified and oversize files, symlinks (out of the tree, in it, broken, loops), hashes, the
dry run, and a deterministic order."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from mneme.code import FileChanged, InvalidPath, dry_run, scan_project, validate_project_path
from mneme.code import scan as scan_module

REPO = Path(__file__).parent / "fixtures" / "coderepo"

KEPT = {
    ".gitignore": "text",
    "README.md": "text",
    "crate/lib.rs": "rust",
    "docs/scratch.txt": "text",  # `/scratch.txt` is anchored to the root
    "keep.log": "text",  # `!keep.log` re-includes it
    "pkg/.gitignore": "text",
    "pkg/report.py": "python",
    "src/inventory.py": "python",
    "svc/server.go": "go",
    "web/Badge.tsx": "typescript",
    "web/api.ts": "typescript",
    "web/cart.js": "javascript",
}
SKIPPED = [
    ("assets/logo.png", "binary"),  # by extension
    ("build", "default_ignored"),  # also in the fixture's .gitignore: the default rule is asked first
    ("data/blob.txt", "binary"),  # a NUL byte in its head
    ("debug.log", "gitignored"),
    ("docs/notes.md", "too_large"),
    ("docs/readme-link.md", "symlink_in_tree"),
    ("escape.md", "symlink_outside"),
    ("logs", "gitignored"),
    ("node_modules", "default_ignored"),
    ("pkg/generated_table.py", "gitignored"),  # pkg/.gitignore, nested
    ("scratch.txt", "gitignored"),
    ("web/cart.min.js", "minified"),
]


def test_the_fixture_repository_is_scanned_as_expected() -> None:
    result = scan_project(REPO, max_file_bytes=4096)
    assert {f.path: f.language for f in result.files} == KEPT
    assert [f.path for f in result.files] == sorted(KEPT)
    assert list(result.skipped_paths) == SKIPPED
    assert result.skipped == {
        "binary": 2,
        "default_ignored": 2,
        "gitignored": 4,
        "minified": 1,
        "symlink_in_tree": 1,
        "symlink_outside": 1,
        "too_large": 1,
    }
    for f in result.files:
        data = (REPO / f.path).read_bytes()
        assert (f.size, f.sha256) == (len(data), hashlib.sha256(data).hexdigest())
        assert f.read() == data and f.abspath == REPO.resolve() / f.path
    assert result.total_bytes == sum(f.size for f in result.files)


def test_the_size_cap_defaults_to_512_kib() -> None:
    result = scan_project(REPO)
    assert "docs/notes.md" in {f.path for f in result.files} and "too_large" not in result.skipped
    assert scan_module.MAX_FILE_BYTES == 512 * 1024


def test_the_dry_run_counts_what_the_scan_keeps() -> None:
    result = scan_project(REPO, max_file_bytes=4096)
    estimate = dry_run(REPO, max_file_bytes=4096)
    assert (estimate.files, estimate.bytes, estimate.skipped) == (len(result.files), result.total_bytes, result.skipped)
    assert estimate.languages == {"go": 1, "javascript": 1, "python": 2, "rust": 1, "text": 5, "typescript": 2}


def test_a_dry_run_reads_only_the_heads_of_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "big.py").write_text("x = 1\n" * 20000)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"read whole {self}"))
    assert dry_run(tmp_path).bytes == 120000


def error(path: str | Path, roots: list[Path] | None = None) -> InvalidPath:
    with pytest.raises(InvalidPath) as caught:
        validate_project_path(path, roots)
    err = caught.value
    assert err.code == "INVALID_INPUT" and err.field == "path"
    assert err.message.startswith(f"Invalid path: {path}")
    assert err.to_dict()["details"]["reason"] == err.reason
    return err


def test_every_path_error_says_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert error(tmp_path / "nowhere").reason == "missing"
    assert error("").reason == "missing"
    (tmp_path / "file.py").write_text("x = 1\n")
    assert error(tmp_path / "file.py").reason == "not_a_directory"
    assert error(REPO / "escape.md").reason == "not_a_directory"  # a symlink to a file
    inside, outside = tmp_path / "allowed", tmp_path / "other"
    inside.mkdir()
    outside.mkdir()
    err = error(outside, [inside])
    assert err.reason == "outside_allowed_roots" and str(inside) in err.message
    assert error(tmp_path / "other" / "missing", [inside]).reason == "outside_allowed_roots"  # roots first
    (inside / "sneaky").symlink_to(outside)
    assert error(inside / "sneaky", [inside]).reason == "outside_allowed_roots"  # judged where it leads
    assert error(inside, []).reason == "outside_allowed_roots"
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        if os.geteuid() == 0:  # root reads anything: make the directory unreadable for this test
            real_scandir = os.scandir

            def scandir(path: str | os.PathLike[str]) -> object:
                if Path(path) == locked:
                    raise PermissionError(13, "Permission denied")
                return real_scandir(path)

            monkeypatch.setattr(scan_module.os, "scandir", scandir)
        err = error(locked)
        assert err.reason == "unreadable" and "Permission denied" in err.message
    finally:
        locked.chmod(0o755)


def test_allowed_roots_admit_themselves_and_below(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert validate_project_path(tmp_path / "a" / "b", [tmp_path / "a"]) == (tmp_path / "a" / "b").resolve()
    assert validate_project_path(tmp_path / "a", [tmp_path / "x", tmp_path / "a"]) == (tmp_path / "a").resolve()
    assert validate_project_path(tmp_path, None) == tmp_path.resolve()
    with pytest.raises(InvalidPath):
        scan_project(tmp_path, allowed_roots=[tmp_path / "a"])
    with pytest.raises(InvalidPath):
        dry_run(tmp_path / "missing")


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.py").write_text("print(1)\n")
    (tmp_path / "secret.py").write_text("KEY = 1\n")
    (root / "loop").symlink_to(root)  # a directory loop
    (root / "src" / "up").symlink_to("..")
    (root / "self").symlink_to(root / "self")  # a link to itself
    (root / "dangling").symlink_to(root / "gone")
    (root / "out.py").symlink_to(tmp_path / "secret.py")
    (root / "outdir").symlink_to(tmp_path)
    (root / "same.py").symlink_to(root / "src" / "main.py")
    result = scan_project(root)
    assert [f.path for f in result.files] == ["src/main.py"]
    assert dict(result.skipped_paths) == {
        "dangling": "symlink_broken",
        "loop": "symlink_in_tree",
        "out.py": "symlink_outside",
        "outdir": "symlink_outside",
        "same.py": "symlink_in_tree",
        "self": "symlink_broken",
        "src/up": "symlink_in_tree",
    }


def test_gitignore_rules_nest_and_negate(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.tmp\ngenerated/\n")
    (tmp_path / "a" / "generated").mkdir(parents=True)
    (tmp_path / "a" / "generated" / "x.py").write_text("x = 1\n")
    (tmp_path / "a" / ".gitignore").write_text("!keep.tmp\nlocal.py\n")
    (tmp_path / "a" / "keep.tmp").write_text("kept\n")
    (tmp_path / "a" / "drop.tmp").write_text("dropped\n")
    (tmp_path / "a" / "local.py").write_text("x = 1\n")
    (tmp_path / "local.py").write_text("x = 1\n")  # a/.gitignore does not reach up
    (tmp_path / ".git" / "info").mkdir(parents=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("private.py\n")
    (tmp_path / "private.py").write_text("x = 1\n")
    result = scan_project(tmp_path)
    assert [f.path for f in result.files] == [".gitignore", "a/.gitignore", "a/keep.tmp", "local.py"]
    assert dict(result.skipped_paths) == {
        ".git": "default_ignored",
        "a/drop.tmp": "gitignored",
        "a/generated": "gitignored",
        "a/local.py": "gitignored",
        "private.py": "gitignored",
    }


@pytest.mark.parametrize(
    "name",
    [
        "node_modules",
        "vendor",
        "third_party",
        ".venv",
        "venv",
        "__pycache__",
        "dist",
        "target",
        "out",
        ".tox",
        ".mypy_cache",
        "pkg.egg-info",
    ],
)
def test_default_ignores_apply_at_any_depth(tmp_path: Path, name: str) -> None:
    (tmp_path / "sub" / name).mkdir(parents=True)
    (tmp_path / "sub" / name / "lib.js").write_text("var x = 1;\n")
    (tmp_path / "sub" / "package-lock.json").write_text("{}\n")
    result = scan_project(tmp_path)
    assert result.files == () and dict(result.skipped_paths) == {
        f"sub/{name}": "default_ignored",
        "sub/package-lock.json": "default_ignored",
    }


def test_binary_and_minified_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"plain text, but a binary extension\n")
    (tmp_path / "late.txt").write_bytes((b"a" * 99 + b"\n") * 90 + b"\0")  # a NUL past the first 8 KiB: kept
    (tmp_path / "bundle.js").write_text("var a=1;" * 400 + "\n")  # one 3,200-character line
    (tmp_path / "style.min.css").write_text("a{b:c}\n")
    (tmp_path / "ok.js").write_text("var a = 1;\n" * 400)
    result = scan_project(tmp_path)
    assert [f.path for f in result.files] == ["late.txt", "ok.js"]
    assert dict(result.skipped_paths) == {"bundle.js": "minified", "model.onnx": "binary", "style.min.css": "minified"}


def test_reading_a_changed_file_fails(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    a, b = scan_project(tmp_path).files
    (tmp_path / "a.py").write_text("x = 2\n")
    with pytest.raises(FileChanged) as caught:
        a.read()
    assert caught.value.code == "FILE_CHANGED" and caught.value.retryable
    (tmp_path / "b.py").unlink()
    with pytest.raises(FileChanged):
        b.read()


def test_the_order_is_sorted_and_repeatable(tmp_path: Path) -> None:
    shutil.copytree(REPO, tmp_path / "copy", symlinks=True)
    for name in ["Z.py", "a.py", "a/b.py", "a-b.py", "a0/c.py", "B/d.go"]:
        (tmp_path / "copy" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "copy" / name).write_text("x = 1\n")
    first = scan_project(tmp_path / "copy")
    paths = [f.path for f in first.files]
    assert paths == sorted(paths) and scan_project(tmp_path / "copy") == first


def test_unreadable_files_and_directories_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ["a.py", "b.py", "sub/c.py"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    real_read, real_scandir = Path.read_bytes, os.scandir

    def read_bytes(self: Path) -> bytes:
        if self.name == "a.py":
            raise PermissionError(13, "Permission denied")
        return real_read(self)

    def scandir(path: str | os.PathLike[str]) -> object:
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(scan_module.os, "scandir", scandir)
    result = scan_project(tmp_path)
    assert [f.path for f in result.files] == ["b.py"]
    assert dict(result.skipped_paths) == {"a.py": "unreadable", "sub": "unreadable"}
