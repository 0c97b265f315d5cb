"""The code index's library: scanning a project directory and chunking its files by syntax.

Nothing here touches the event log, the read models or the tools: an indexer built on top calls

    root = scan.validate_project_path(path, allowed_roots)   # InvalidPath, code INVALID_INPUT, field "path"
    estimate = scan.dry_run(root)                              # files, bytes, per language, skips per reason
    result = scan.scan_project(root, max_file_bytes=...)      # ScanResult: SourceFile(path, language, size, sha256)
    chunker = chunk.Chunker()                                  # one per thread: tokenizer + parsers
    for f in result.files:                                     # compare f.sha256 with what is indexed
        chunks = chunker.chunk(f.path, f.read(), f.language)  # Chunk(path, language, start_line, end_line,
                                                               #       chunk_type, name, scope, header, code, tokens)

and embeds `Chunk.text` (header line + code), which is never over `Chunker.budget` tokens of the embedding
model's own tokenizer (`tokens.default_budget()`: the default model's limit). Chunking is a pure function of
(bytes, path, language, budget, tokenizer, CHUNKER_VERSION), so chunks can be rebuilt from the same bytes.

Modules: `scan` (walking, validation, hashing), `ignore` (gitignore, default, binary and minified rules),
`languages` (extensions, grammars, what a node defines), `windows` (the cAST windowing), `chunk` (chunks,
headers, the token check), `tokens` (the tokenizer and budgets).
"""

from mneme.code.chunk import CHUNKER_VERSION, Chunk, Chunker
from mneme.code.scan import (
    DryRun,
    FileChanged,
    InvalidPath,
    ScanResult,
    SourceFile,
    dry_run,
    scan_project,
    validate_project_path,
)
from mneme.code.tokens import TokenCounter, default_budget

__all__ = [
    "CHUNKER_VERSION",
    "Chunk",
    "Chunker",
    "DryRun",
    "FileChanged",
    "InvalidPath",
    "ScanResult",
    "SourceFile",
    "TokenCounter",
    "default_budget",
    "dry_run",
    "scan_project",
    "validate_project_path",
]
