"""The note tools on real files: the path guard, reading, writing, searching, listing, bad arguments."""

import os

import pytest

import diffs
import notes
import versions
from conftest import run_tool
from reading import MAX_TOOL_OUTPUT
from tools import TOOLS, execute_tool


# --- the path guard ---

@pytest.mark.parametrize("path, problem", [
    ("/etc/passwd.md", "absolute"),
    ("~/secret.md", "'~'"),
    ("../outside.md", "outside"),
    ("work/../../outside.md", "outside"),
    ("a\0b.md", "control characters"),
    (".git/config.md", "hidden"),
    ("work/.obsidian/x.md", "hidden"),
    ("notes.py", "not a note"),
    ("", "non-empty"),
    ("C:\\\\Windows\\\\x.md", "absolute"),
])
def test_path_guard_refuses_escapes_and_non_notes(notebook, path, problem):
    for tool, args in (("read_note", {"file_path": path}), ("write_note", {"file_path": path, "content": "x"})):
        result = run_tool(notebook, tool, **args)
        assert result.startswith("Error:") and problem in result
        assert str(notebook.kb.parent) not in result  # the host path is never leaked


def test_sibling_folder_with_common_prefix_is_outside(notebook, kb):
    evil = kb.parent / (kb.name + "_evil")
    evil.mkdir()
    (evil / "x.md").write_text("secret", encoding="utf-8")
    result = run_tool(notebook, "read_note", file_path=f"../{kb.name}_evil/x.md")
    assert result.startswith("Error:") and "secret" not in result


def test_symlink_leading_outside_is_refused(notebook, kb, tmp_path):
    (tmp_path / "secret.md").write_text("password=hunter2", encoding="utf-8")
    os.symlink(tmp_path / "secret.md", kb / "link.md")
    result = run_tool(notebook, "read_note", file_path="link.md")
    assert result.startswith("Error:") and "hunter2" not in result
    assert run_tool(notebook, "write_note", file_path="link.md", content="x", overwrite=True).startswith("Error:")
    assert (tmp_path / "secret.md").read_text() == "password=hunter2"


def test_path_inside_that_uses_dotdot_is_fine(notebook):
    assert "装饰器" in run_tool(notebook, "read_note", file_path="work/../python.md")


# --- read ---

def test_read_note_returns_text_with_a_header(notebook):
    result = run_tool(notebook, "read_note", file_path="python.md")
    assert result.startswith("python.md (lines 1-4 of 4)") and "装饰器很有用" in result


def test_long_note_is_cut_and_can_be_read_on(notebook, kb):
    (kb / "long.md").write_text("".join(f"line {i}\n" for i in range(1, 1001)), encoding="utf-8")
    first = run_tool(notebook, "read_note", file_path="long.md")
    assert len(first) <= MAX_TOOL_OUTPUT and "start_line=201" in first and "line 200\n" in first
    second = run_tool(notebook, "read_note", file_path="long.md", start_line=201)
    assert second.splitlines()[1] == "line 201"


def test_a_note_past_the_read_limit_says_its_lines_are_those_read(notebook, kb):
    part = "# Part\n" + "word " * 20 + "\n"
    (kb / "big.md").write_text(part * (6_000_000 // len(part)), encoding="utf-8")
    assert "lines in its first 5000000 bytes. Its headings" in run_tool(notebook, "read_note", file_path="big.md")
    past = run_tool(notebook, "read_note", file_path="big.md", start_line=10_000_000)
    assert past.startswith("Error: line 10000000 is outside the note, whose first 5000000 bytes are read: ")


def test_huge_single_line_stays_bounded(notebook, kb):
    (kb / "wide.md").write_text("x" * 100_000, encoding="utf-8")
    assert len(run_tool(notebook, "read_note", file_path="wide.md")) <= MAX_TOOL_OUTPUT


@pytest.mark.parametrize("data, expected", [
    (b"", "is empty"),
    (b"\x89PNG\r\n\x1a\n\0\0\0binary", "binary"),
    ("caf\xe9 latin-1 text".encode("latin-1"), "caf\ufffd latin-1"),
    (b"\xef\xbb\xbf# BOM note", "# BOM note"),
])
def test_odd_files_never_crash(notebook, kb, data, expected):
    (kb / "odd.md").write_bytes(data)
    assert expected in run_tool(notebook, "read_note", file_path="odd.md")
    assert not run_tool(notebook, "search_notes", query="latin").startswith("Error: search")


def test_missing_note_and_folder_say_what_to_do(notebook):
    assert "search_notes or list_notes" in run_tool(notebook, "read_note", file_path="nope.md")
    assert "Error:" in run_tool(notebook, "read_note", file_path="work.md")


# --- write ---

def test_write_creates_folders_and_refuses_to_replace(notebook, kb):
    created = run_tool(notebook, "write_note", file_path="new/dir/git.md", content="# Git\n")
    assert created.startswith("+ new/dir/git.md  +1")
    assert (kb / "new/dir/git.md").read_text(encoding="utf-8") == "# Git\n"
    refused = run_tool(notebook, "write_note", file_path="python.md", content="gone")
    assert refused.startswith("Error:") and "overwrite" in refused
    assert "装饰器" in (kb / "python.md").read_text(encoding="utf-8")


def test_write_failure_leaves_no_temp_file(notebook, kb, monkeypatch):
    def broken_replace(src, dst, **folders):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", broken_replace)
    result = run_tool(notebook, "write_note", file_path="python.md", content="new", overwrite=True)
    assert result.startswith("Error:") and "No space left" in result
    assert "装饰器" in (kb / "python.md").read_text(encoding="utf-8")
    left = [p.relative_to(kb).as_posix() for p in kb.rglob("*") if p.is_file() and p.name not in (notes.LOCK_FILE, versions.UNDO_LOG)]
    assert sorted(left) == ["python.md", "vim.md", "work/meeting.md"]


# --- search and list ---

def test_search_finds_all_words_in_any_order_with_lines(notebook):
    result = run_tool(notebook, "search_notes", query="quits saves")
    assert "vim.md" in result and "4: `:wq` saves and quits." in result and "python.md" not in result


def test_search_is_case_insensitive_and_handles_chinese(notebook):
    assert "python.md" in run_tool(notebook, "search_notes", query="VENV")
    assert "python.md" in run_tool(notebook, "search_notes", query="装饰器")


def test_search_folder_filter_goes_through_the_guard(notebook):
    assert "work/meeting.md" in run_tool(notebook, "search_notes", query="ship", folder="work")
    assert run_tool(notebook, "search_notes", query="ship", folder="../..").startswith("Error:")


def test_search_output_is_bounded_with_a_count(notebook, kb):
    for i in range(300):
        (kb / f"n{i}.md").write_text("common word\n" * 5, encoding="utf-8")
    result = run_tool(notebook, "search_notes", query="common")
    assert len(result) <= 4200 and "more matched" in result


def test_list_notes_newest_first_and_skips_hidden(notebook, kb):
    (kb / ".history").mkdir()
    (kb / ".history" / "old.md").write_text("x", encoding="utf-8")
    os.utime(kb / "vim.md", (2_000_000_000, 2_000_000_000))
    result = run_tool(notebook, "list_notes")
    assert result.splitlines()[1].startswith("vim.md") and ".history" not in result and "3 note(s)" in result
    assert "work/meeting.md" in run_tool(notebook, "list_notes", folder="work")


# --- bad calls from the model ---

@pytest.mark.parametrize("name, arguments, expected", [
    ("read_note", "{not json", "not valid JSON"),
    ("read_note", "[1, 2]", "JSON object"),
    ("read_note", "{}", "missing argument(s): file_path"),
    ("read_note", '{"file_path": 3}', "must be of type string"),
    ("read_note", '{"file_path": "python.md", "start_line": "2"}', "must be of type integer"),
    ("write_note", '{"file_path": "a.md", "content": "x", "overwrite": "yes"}', "must be of type boolean"),
    ("delete_everything", "{}", "unknown tool"),
])
def test_bad_calls_come_back_as_errors(notebook, name, arguments, expected):
    result = execute_tool(name, arguments, notebook)
    assert result.error and result.text.startswith("Error:") and expected in result.text


def test_empty_arguments_mean_no_arguments(notebook):
    assert "note(s)" in execute_tool("list_notes", None, notebook).text
    assert "note(s)" in execute_tool("list_notes", "", notebook).text


def test_every_schema_is_well_formed():
    for schema in (tool.schema for tool in TOOLS.values()):
        function = schema["function"]
        assert function["description"] and function["parameters"]["type"] == "object"
        assert set(function["parameters"]["required"]) <= set(function["parameters"]["properties"])


def test_search_and_list_never_show_files_behind_links_leading_out(notebook, kb, tmp_path):
    (tmp_path / "passwd").write_text("SECRETPW root", encoding="utf-8")
    os.symlink(tmp_path / "passwd", kb / "pw.md")
    os.symlink(kb / "vim.md", kb / "vim-link.md")  # a link that stays inside is fine
    assert run_tool(notebook, "search_notes", query="SECRETPW").startswith("No notes match")
    listing = run_tool(notebook, "list_notes")
    assert "pw.md" not in listing and "vim-link.md" in listing


def test_symlink_loop_and_fifo_are_refused_without_hanging(notebook, kb):
    os.symlink(kb / "loop.md", kb / "loop.md")
    os.mkfifo(kb / "pipe.md")
    loop = run_tool(notebook, "read_note", file_path="loop.md")
    assert loop.startswith("Error:") and str(kb) not in loop
    assert "not a regular file" in run_tool(notebook, "read_note", file_path="pipe.md")
    assert "note(s)" in run_tool(notebook, "list_notes") and "pipe.md" not in run_tool(notebook, "list_notes")


def test_lone_surrogates_in_arguments_never_crash_a_tool(notebook):
    for name, args in (("list_notes", '{"folder": "\\ud800work"}'), ("read_note", '{"file_path": "\\ud800.md"}'),
                       ("write_note", '{"file_path": "s\\udc80.md", "content": "x\\ud800"}')):
        assert "failed unexpectedly" not in execute_tool(name, args, notebook).text


def test_a_reviewed_change_shows_hidden_characters_and_even_a_newline_only_change(notebook, kb):
    asked = []

    def shown(answer):  # what the person reviews: every file's diff
        return lambda approval: asked.append("\n".join(d for _, d in diffs.diffs(approval.change))) or answer
    result = execute_tool("append_note", {"file_path": "vim.md", "content": "evil\u202eexe.md"}, notebook,
                          shown(True), review=True)
    assert not result.error and "\\u202e" in asked[0] and "\u202e" not in asked[0]  # the page cannot be fooled
    (kb / "bare.md").write_bytes(b"no newline at the end")
    execute_tool("write_note", {"file_path": "bare.md", "content": "no newline at the end\n", "overwrite": True},
                 notebook, shown(False), review=True)
    assert "only the line endings or the final newline change" in asked[1]
    assert (kb / "bare.md").read_bytes() == b"no newline at the end"  # rejected: untouched


def test_a_result_cut_by_the_last_guard_vouches_for_no_line(notebook, monkeypatch):
    import dataclasses
    import tools
    huge = dataclasses.replace(tools.TOOLS["read_note"],
                               function=lambda nb, **_: notes.Shown("x" * 20_000, {"python.md": [1]}))
    monkeypatch.setitem(tools.TOOLS, "read_note", huge)
    result = execute_tool("read_note", {"file_path": "python.md"}, notebook)
    assert "[… cut:" in result.text and "lines" not in result.shown
