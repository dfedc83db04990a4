"""The documentation stays true to the repository it ships in.

- every relative link in README.md and docs/*.md reaches a file of this repository (and,
  with an #anchor, a heading of that file);
- no tracked file points outside the repository at the old spec folder;
- every table and view of a freshly migrated warehouse is named in docs/protocol.md's
  warehouse section, so users can look up what they query.

Each check is a small function; the tests at the bottom feed them broken input, so a
check that silently stopped finding anything would fail too.
"""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
CONTRACT_DOC = REPO / "docs" / "protocol.md"
WAREHOUSE_SECTION = "Warehouse relations"
# Spelled in two parts so this file does not contain the string it forbids.
OUTSIDE_POINTER = "../" + "shared"

_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = ("http://", "https://", "mailto:")


# --- helpers -----------------------------------------------------------------------------


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link outside code."""
    found = []
    for number, line in prose_lines(text):
        reference = _REFERENCE_LINK.match(line)
        if reference:
            found.append((number, reference.group(1)))
            continue
        found += [(number, m.group(1)) for m in _INLINE_LINK.finditer(_INLINE_CODE.sub("", line))]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text, duplicates numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(text):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def broken_links(doc: Path, root: Path) -> list[str]:
    """Relative links of `doc` that leave `root`, reach no file, or name a missing anchor."""
    problems = []
    for number, target in links(doc.read_text(encoding="utf-8")):
        if target.lower().startswith(_EXTERNAL):
            continue
        where = f"{doc.relative_to(root)}:{number}: {target}"
        path_part, _, anchor = target.partition("#")
        resolved = (doc.parent / path_part).resolve() if path_part else doc.resolve()
        if not resolved.is_relative_to(root.resolve()):
            problems.append(f"{where} points outside the repository")
        elif not resolved.exists():
            problems.append(f"{where} does not exist")
        elif (anchor and resolved.suffix == ".md"
              and anchor not in anchors(resolved.read_text(encoding="utf-8"))):
            problems.append(f"{where}: no heading with anchor #{anchor}")
    return problems


def files_mentioning(root: Path, paths: list[str], needle: str) -> list[str]:
    wanted = needle.encode()
    return [p for p in paths if (root / p).is_file() and wanted in (root / p).read_bytes()]


def tracked_files(root: Path) -> list[str]:
    try:
        result = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                                check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"not a git checkout, cannot list tracked files: {exc}")
    return [p for p in result.stdout.decode().split("\0") if p]


def section(text: str, title: str) -> str:
    """The body of the level-2 section `title` (up to the next level-2 heading)."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no '## {title}' section"
    return match.group(1)


def unmentioned(names: list[str], text: str) -> list[str]:
    """Names that never appear as `name` (in backticks) in text."""
    return [n for n in names if f"`{n}`" not in text]


def warehouse_relations() -> list[str]:
    from benchledger.warehouse.db import connect

    with connect(":memory:") as con:
        rows = con.execute("SELECT table_name FROM information_schema.tables "
                           "WHERE table_schema = 'main' ORDER BY table_name").fetchall()
    return [name for (name,) in rows]


# --- the checks on this repository -------------------------------------------------------


def test_docs_exist():
    assert CONTRACT_DOC in DOCS and (REPO / "docs" / "architecture.md") in DOCS


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc):
    assert broken_links(doc, REPO) == []


def test_no_tracked_file_points_outside_the_repository():
    paths = tracked_files(REPO)
    assert "README.md" in paths  # the listing itself worked
    assert files_mentioning(REPO, paths, OUTSIDE_POINTER) == []


def test_every_warehouse_relation_is_documented():
    names = warehouse_relations()
    assert {"runs", "windows", "entries", "validations"} <= set(names)  # migrations ran
    documented = section(CONTRACT_DOC.read_text(encoding="utf-8"), WAREHOUSE_SECTION)
    assert unmentioned(names, documented) == []


# --- the checks can fail -----------------------------------------------------------------


def test_broken_links_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# A heading\n\n## `[sweep]` keys\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[ok](docs/there.md) [ok](docs/there.md#a-heading) [ok](docs/there.md#sweep-keys)\n"
        "[web](https://example.org/x) [mail](mailto:a@b.c) `[code](nowhere.md)`\n"
        "```\n[fenced](nowhere.md)\n```\n"
        "[missing](docs/nowhere.md)\n"
        "[bad anchor](docs/there.md#no-such-heading)\n"
        f"[outside]({OUTSIDE_POINTER}/SPEC.md)\n"
        "[self](#no-heading-here)\n"
        "[ref]: docs/gone.md\n")
    problems = broken_links(doc, tmp_path)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "docs/nowhere.md does not exist",
        "docs/there.md#no-such-heading: no heading with anchor #no-such-heading",
        f"{OUTSIDE_POINTER}/SPEC.md points outside the repository",
        "#no-heading-here: no heading with anchor #no-heading-here",
        "docs/gone.md does not exist",
    ]


def test_slugs_follow_github():
    assert slug("Where this implementation differs") == "where-this-implementation-differs"
    assert slug("`[arms.simulator]`") == "armssimulator"
    assert slug("The traps (T1-T16)") == "the-traps-t1-t16"
    assert anchors("# Notes\n## Notes\n```\n# not a heading\n```\n") == {"notes", "notes-1"}


def test_outside_pointers_are_found(tmp_path):
    (tmp_path / "a.md").write_text(f"see [spec]({OUTSIDE_POINTER}/SPEC.md)\n")
    (tmp_path / "b.py").write_text("# nothing to see\n")
    assert files_mentioning(tmp_path, ["a.md", "b.py"], OUTSIDE_POINTER) == ["a.md"]


def test_undocumented_relations_are_found():
    text = "## Warehouse relations\n\n`runs` and windows\n\n## Next\n\n`entries`\n"
    documented = section(text, WAREHOUSE_SECTION)
    assert unmentioned(["runs", "windows", "entries"], documented) == ["windows", "entries"]
