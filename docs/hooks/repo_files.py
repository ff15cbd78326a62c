"""MkDocs hook: files of the repository that the guide links to from outside ``docs/``
(``../benchmarks/results/*.png``) become part of the site, so links work on GitHub and on
the site alike and ``mkdocs build --strict`` still fails on a link to a missing file."""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

LINK = re.compile(r"\]\(\.\./((?:benchmarks|examples)/[^)\s]+)\)")


def _repo(config) -> Path:
    return Path(config["docs_dir"]).resolve().parent


def on_files(files, config):
    repo = _repo(config)
    for md in Path(config["docs_dir"]).glob("*.md"):
        for rel in LINK.findall(md.read_text(encoding="utf-8")):
            if (repo / rel).is_file() and files.get_file_from_path(f"repo/{rel}") is None:
                files.append(File.generated(config, f"repo/{rel}", abs_src_path=str(repo / rel)))
    return files


def on_page_markdown(markdown, page, config, files):
    if "/" in page.file.src_uri:  # pages in sub-folders link with their own relative paths
        return markdown
    return LINK.sub(lambda m: f"](repo/{m.group(1)})" if (_repo(config) / m.group(1)).is_file()
                    else m.group(0), markdown)
