"""Runs the code blocks of the documentation as programs.

Every ```c, ```python and ```lua block of a Markdown file is a whole program;
a ```text block after it (before the next program block) is its exact
standard output. A ```console block is a shell session: its "$ " lines run
in order in one shell (stopping at the first that fails), from a folder that
holds a copy of examples/, with the Python package's console script on PATH,
and its other lines are what they print. A Python file's module docstring may hold literal blocks
(introduced by a line ending in ``::``), run as Python programs.

    python3 tests/docs/blocks.py --build build/dev --python build/venv/bin/python README.md
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import List, NamedTuple, Optional

REPO = Path(__file__).resolve().parents[2]
PROGRAM_LANGUAGES = ("c", "python", "lua", "console")
TIMEOUT_S = 120.0
#: How much of each end of a captured stream a failure reason shows.
SHOWN_CHARS = 2000

OPENING_FENCE = re.compile(r"^( {0,3})(`{3,})\s*([^`\s]+)?[^`]*$")


@dataclass
class Block:
    language: str
    source: str
    line: int  # of the opening fence, or of the line ending in "::" (from 1)
    expected: Optional[str] = None


class Result(NamedTuple):
    ok: bool
    stdout: str
    stderr: str
    reason: str


def extract_markdown(text: str) -> List[Block]:
    """Every fenced block with an info string, each program block given the
    content of the first ``text`` block after it (before the next program)."""
    blocks: List[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = OPENING_FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, info = len(match.group(1)), match.group(2), match.group(3)
        start, body = i + 1, []
        i += 1
        # A closing fence is at least as long as the opening one.
        while i < len(lines) and not re.match(r"^ {0,3}%s`*\s*$" % fence, lines[i]):
            body.append(_unindent(lines[i], indent))
            i += 1
        i += 1
        if info:
            blocks.append(Block(info.lower(), "".join(l + "\n" for l in body), start))
    _pair_expected_output(blocks)
    return blocks


def _unindent(line: str, indent: int) -> str:
    """A fence indented by n spaces has its content indented by up to n."""
    spaces = len(line) - len(line.lstrip(" "))
    return line[min(spaces, indent):]


def _pair_expected_output(blocks: List[Block]) -> None:
    program: Optional[Block] = None
    for block in blocks:
        if block.language in PROGRAM_LANGUAGES:
            program = block
        elif block.language == "text" and program is not None:
            program.expected = block.source
            program = None


def extract_docstring_blocks(path: str | Path) -> List[Block]:
    """The literal blocks of a Python file's module docstring, as Python."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree, clean=False)
    if docstring is None:
        return []
    first_line = tree.body[0].lineno  # the docstring's opening quotes
    lines = docstring.splitlines()
    blocks = []
    for n, line in enumerate(lines):
        if not line.rstrip().endswith("::"):
            continue
        depth = len(line) - len(line.lstrip())
        body = []
        for following in lines[n + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= depth:
                break
            body.append(following)
        source = textwrap.dedent("\n".join(body)).strip("\n")
        if source:
            blocks.append(Block("python", source + "\n", first_line + n))
    return blocks


def program_blocks(path: str | Path) -> List[Block]:
    """The blocks of a file that are programs: a Markdown file's c, python
    and lua blocks, or a Python file's docstring blocks."""
    if str(path).endswith(".py"):
        return extract_docstring_blocks(path)
    text = Path(path).read_text(encoding="utf-8")
    return [b for b in extract_markdown(text) if b.language in PROGRAM_LANGUAGES]


def normalise(output: str) -> str:
    """Output as compared: no trailing spaces on a line, no trailing blank lines."""
    return "\n".join(line.rstrip() for line in output.splitlines()).rstrip("\n")


def run_block(block: Block, workdir: str | Path, build_dir: str | Path, python: str,
              timeout: float = TIMEOUT_S) -> Result:
    """Runs one program block in ``workdir`` (fresh and empty) and checks it
    exits with 0 and prints its expected output (or anything, when none)."""
    workdir, build_dir = Path(workdir), Path(build_dir).resolve()
    if os.sep in python:  # a path relative to here, not to workdir
        python = os.path.abspath(python)
    where = "%s block at line %d" % (block.language, block.line)
    env = dict(os.environ)
    if block.language == "c":
        (workdir / "main.c").write_text(block.source, encoding="utf-8")
        compile_argv = ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror",
                        "-I%s" % (REPO / "libqueue" / "include"), "main.c",
                        "-L%s" % build_dir, "-lqueue", "-Wl,-rpath,%s" % build_dir,
                        "-lpthread", "-o", "main"]
        status, out, err = _run(compile_argv, workdir, env, timeout)
        if status != 0:
            return _failure("%s does not compile" % where, status, timeout, out, err)
        argv = ["./main"]
    elif block.language == "python":
        (workdir / "main.py").write_text(block.source, encoding="utf-8")
        argv = [python, "main.py"]
    elif block.language == "console":
        commands = [l[2:] for l in block.source.splitlines() if l.startswith("$ ")]
        if block.expected is None:
            block = Block(block.language, block.source, block.line, "".join(
                l + "\n" for l in block.source.splitlines() if not l.startswith("$ ")))
        (workdir / "session.sh").write_text("set -e\n" + "\n".join(commands) + "\n")
        shutil.copytree(REPO / "examples", workdir / "examples")
        if os.path.dirname(python):
            env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
        argv = ["bash", "session.sh"]
    elif block.language == "lua":
        (workdir / "main.lua").write_text(block.source, encoding="utf-8")
        # The build tree keeps libqueue.lua in lua/, and the C part for Lua
        # 5.4 in lua/5.4/libqueue/core.so. The Lua path has nothing else
        # (no ";;"), so that no libqueue installed elsewhere is loaded.
        modules = build_dir / "lua"
        env["LUA_CPATH"] = "%s/5.4/?.so;;" % modules
        env["LUA_PATH"] = "%s/?.lua" % modules
        argv = ["lua5.4", "main.lua"]
    else:
        return Result(False, "", "", "%s: not a program language" % where)

    status, out, err = _run(argv, workdir, env, timeout)
    if status != 0:
        return _failure("%s failed" % where, status, timeout, out, err)
    if not out.strip():
        return _failure("%s printed nothing" % where, status, timeout, out, err)
    if block.expected is not None and normalise(out) != normalise(block.expected):
        diff = difflib.unified_diff(normalise(block.expected).splitlines(),
                                    normalise(out).splitlines(),
                                    "expected (text block)", "printed", lineterm="")
        return _failure("%s printed other than its text block:\n%s" % (where, "\n".join(diff)),
                        status, timeout, out, err)
    return Result(True, out, err, "")


def _run(argv: List[str], cwd: Path, env: dict, timeout: float):
    """(exit status or None on a timeout, stdout, stderr). The program runs in
    a session of its own so that a timeout kills whatever it started too."""
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True)
    except OSError as e:
        return 127, "", "cannot run %s: %s" % (argv[0], e)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err


def _failure(what: str, status: Optional[int], timeout: float, out: str, err: str) -> Result:
    if status is None:
        what += " (timed out after %g s)" % timeout
    elif status < 0:
        what += " (killed by signal %d)" % -status
    elif status != 0:
        what += " (exit status %d)" % status
    reason = "%s\n--- stdout ---\n%s\n--- stderr ---\n%s" % (what, _shown(out), _shown(err))
    return Result(False, out, err, reason)


def _shown(output: str) -> str:
    """A compiler's first error is at the start, a traceback's at the end."""
    output = output.rstrip()
    if len(output) <= 2 * SHOWN_CHARS:
        return output
    return "%s\n[...]\n%s" % (output[:SHOWN_CHARS], output[-SHOWN_CHARS:])


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", required=True, help="the CMake build directory")
    parser.add_argument("--python", default=sys.executable,
                        help="an interpreter with the libqueue package installed")
    parser.add_argument("files", nargs="+", metavar="FILE", help="Markdown or Python files")
    args = parser.parse_args(argv)
    passed = failed = 0
    for path in args.files:
        for block in program_blocks(path):
            with tempfile.TemporaryDirectory(prefix="lq-doc-") as workdir:
                result = run_block(block, workdir, args.build, args.python)
            label = "%s:%d %s" % (path, block.line, block.language)
            if result.ok:
                passed += 1
                print("ok", label)
            else:
                failed += 1
                print("FAIL", label, "-", result.reason)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
