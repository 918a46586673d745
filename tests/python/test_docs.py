"""Every program block of README.md and of the package's docstring, and every
program in examples/, runs as written (tests/docs/blocks.py), and the harness
itself fails what it should."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, List

import pytest

import libqueue

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "docs"))
import blocks  # noqa: E402

DOCUMENTS = [REPO / "README.md", REPO / "docs" / "schedules.md", REPO / "docs" / "asyncio.md",
             REPO / "python" / "libqueue" / "__init__.py"]


def _documented_blocks() -> List[Any]:
    params = []
    for path in DOCUMENTS:
        name = path.relative_to(REPO)
        for block in blocks.program_blocks(path):
            params.append(pytest.param(block, id="%s:%d-%s" % (name, block.line, block.language)))
    return params


@pytest.fixture
def build_dir() -> str:
    path = os.environ.get("LQ_BUILD_DIR")
    if not path:
        if os.environ.get("LQ_REQUIRE_SERVERS"):
            pytest.fail("LQ_REQUIRE_SERVERS is set but LQ_BUILD_DIR (the CMake build "
                        "directory) is not")
        pytest.skip("LQ_BUILD_DIR (the CMake build directory) is not set")
    return path


def run(block: blocks.Block, tmp_path: Path, build_dir: str, **options: Any) -> blocks.Result:
    return blocks.run_block(block, tmp_path, build_dir, sys.executable, **options)


def only_program(markdown: str) -> blocks.Block:
    [block] = [b for b in blocks.extract_markdown(markdown)
               if b.language in blocks.PROGRAM_LANGUAGES]
    return block


@pytest.mark.parametrize("block", _documented_blocks())
def test_documented_block_runs(block: blocks.Block, tmp_path: Path, build_dir: str) -> None:
    result = run(block, tmp_path, build_dir)
    assert result.ok, result.reason


EXAMPLES = sorted(p for p in (REPO / "examples").iterdir() if p.suffix in (".c", ".py", ".lua"))
LANGUAGE_OF = {".c": "c", ".py": "python", ".lua": "lua"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: "examples/" + p.name)
def test_example_runs_with_its_defaults(path: Path, tmp_path: Path, build_dir: str) -> None:
    block = blocks.Block(LANGUAGE_OF[path.suffix], path.read_text(), 1)
    result = run(block, tmp_path, build_dir)
    assert result.ok, result.reason


QUICKSTART_URL = '"sqlite:jobs.db"'


def _quickstarts() -> List[blocks.Block]:
    """The README's quick start, one program a language: the first block of
    each that opens jobs.db."""
    found = {}
    for block in blocks.program_blocks(REPO / "README.md"):
        if QUICKSTART_URL in block.source and block.language not in found:
            found[block.language] = block
    return [found[language] for language in ("c", "python", "lua")]


@pytest.mark.parametrize("language", ["c", "python", "lua"])
def test_a_quickstart_runs_with_only_its_url_changed(db, language: str, tmp_path: Path,
                                                     build_dir: str) -> None:
    """The README: "On PostgreSQL or MariaDB only the URL changes"."""
    [block] = [b for b in _quickstarts() if b.language == language]
    source = block.source.replace(QUICKSTART_URL, '"%s"' % db.url)
    result = run(blocks.Block(block.language, source, block.line, block.expected), tmp_path,
                 build_dir)
    assert result.ok, result.reason


def test_every_language_has_an_example() -> None:
    assert {LANGUAGE_OF[p.suffix] for p in EXAMPLES} == {"c", "python", "lua"}


def test_readme_has_a_program_in_each_language() -> None:
    languages = {b.language for b in blocks.program_blocks(REPO / "README.md")}
    assert languages >= {"c", "python", "lua"}


# ---------------------------------------------------------------------------
# The harness: what it reads.

FENCE = "```"
DOCUMENT = """\
# Title

{f}sh
make install
{f}

{f}python
print("one")
{f}

Some words.

{f}text
one
{f}

{f}
no info string: not a block
{f}

  {f}lua
  print("two")
  {f}

{f}c
int main(void) {{ return 0; }}
{f}

{f}text
belongs to the c block
{f}
""".format(f=FENCE)


def test_markdown_blocks_are_found_with_their_lines_and_outputs() -> None:
    found = [(b.language, b.line, b.expected) for b in blocks.extract_markdown(DOCUMENT)]
    assert found == [
        ("sh", 3, None),
        ("python", 7, "one\n"),
        ("text", 13, None),
        ("lua", 21, None),
        ("c", 25, "belongs to the c block\n"),
        ("text", 29, None),
    ]
    assert blocks.extract_markdown(DOCUMENT)[3].source == 'print("two")\n'


def test_docstring_literal_blocks_are_python_programs(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text('"""A module.\n\nExample::\n\n    import os\n\n    print(os.sep)\n\n'
                      'Not code.\n"""\n\nX = 1\n')
    [block] = blocks.extract_docstring_blocks(module)
    assert (block.language, block.line, block.source) == (
        "python", 3, "import os\n\nprint(os.sep)\n")


# ---------------------------------------------------------------------------
# The harness: what it fails and what it passes.

def program(language: str, source: str, expected: str | None = None) -> str:
    text = "{f}{lang}\n{src}\n{f}\n".format(f=FENCE, lang=language, src=source)
    if expected is not None:
        text += "\n{f}text\n{out}\n{f}\n".format(f=FENCE, out=expected)
    return text


C_VERSION = '#include <stdio.h>\n#include <libqueue.h>\n\nint main(void) {\n' \
            '    printf("%s\\n", lq_version_string());\n    return 0;\n}'

FAILING = {
    "python-raises": (program("python", 'print("before")\nraise RuntimeError("boom")'),
                      "RuntimeError: boom"),
    "c-does-not-compile": (program("c", "int main(void) { return undeclared; }"),
                           "does not compile"),
    "lua-undefined-function": (program("lua", 'print("before")\nresize("cat.png")'),
                               "resize"),
    "output-differs": (program("python", 'print("two")', expected="one"), "text block"),
    "prints-nothing": (program("python", "x = 1"), "printed nothing"),
    "console-output-differs": (program("console", "$ echo two\none"), "text block"),
    "console-command-fails": (program("console", "$ echo one\none\n$ false\n$ echo two\ntwo"),
                              "exit status 1"),
    "console-cli-refuses": (program("console", "$ libqueue --url sqlite:q.db --table jobs stats"),
                            "does not exist"),
}


@pytest.mark.parametrize("markdown,why", FAILING.values(), ids=FAILING.keys())
def test_harness_fails(markdown: str, why: str, tmp_path: Path, build_dir: str) -> None:
    result = run(only_program(markdown), tmp_path, build_dir)
    assert not result.ok
    assert why in result.reason
    assert "line 1" in result.reason


PASSING = {
    "c": program("c", C_VERSION, expected=libqueue.__version__),
    # Trailing spaces and blank lines of a text block do not count.
    "python": program("python", "import libqueue\nprint(libqueue.__version__)",
                      expected=libqueue.__version__ + "   \n"),
    "lua": program("lua", 'print(require("libqueue").version)', expected=libqueue.__version__),
    "console": program("console", "$ ls examples | grep -c handlers.py\n1\n"
                                  "$ libqueue --url sqlite:q.db --table jobs init --json\n"
                                  '{"ready": true, "table": "jobs"}'),
}


@pytest.mark.parametrize("markdown", PASSING.values(), ids=PASSING.keys())
def test_harness_passes(markdown: str, tmp_path: Path, build_dir: str) -> None:
    result = run(only_program(markdown), tmp_path, build_dir)
    assert result.ok, result.reason


def test_harness_fails_a_block_past_its_timeout(tmp_path: Path, build_dir: str) -> None:
    block = only_program(program("python", 'import time\nprint("started")\ntime.sleep(60)'))
    started = time.monotonic()
    result = run(block, tmp_path, build_dir, timeout=2)
    assert not result.ok
    assert "timed out after 2 s" in result.reason
    assert time.monotonic() - started < 30
