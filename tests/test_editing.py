"""The editing tools on real notes: edit, append, overwrite, move, delete, confirmation, /undo in the REPL."""

import codecs

import pytest
from conftest import make_notebook, run_repl, run_tool, tool_call

import terminal
import versions
import approval
import changing


def yes(approval):
    return True


def history_texts(kb, rel):
    return [path.read_text(encoding="utf-8") for path in versions.list_versions(kb, rel)]


LONG_NOTE = "".join(f"Line {i}: some text about topic {i}.\n" for i in range(1, 400)).replace(
    "Line 200: some text", "Line 200: sme text with a tpyo"
)


# --- edit_note ---


def test_fixing_a_typo_changes_only_that_passage(notebook, kb):
    (kb / "long.md").write_text(LONG_NOTE, encoding="utf-8")
    result = run_tool(notebook, "edit_note", file_path="long.md", old_text="sme text with a tpyo",
                 new_text="some text with a typo")
    assert result.startswith("~ long.md  +1 \u22121")
    after = (kb / "long.md").read_bytes()
    assert after == LONG_NOTE.replace("sme text with a tpyo", "some text with a typo").encode()
    assert history_texts(kb, "long.md") == [LONG_NOTE]


def test_a_passage_copied_with_a_search_hits_line_numbers_is_edited_as_the_note_has_it(notebook, kb):
    note = "# Times\n\n12: the old line\n- keep me\n- change me\n"
    (kb / "times.md").write_text(note, encoding="utf-8")
    assert "\n  4: - keep me\n  5: - change me" in run_tool(notebook, "search_notes", query="keep change")
    run_tool(notebook, "edit_note", file_path="times.md", old_text="4: - keep me\n5: - change me",
             new_text="4: - keep me\n5: - changed")  # as the hit showed them
    assert (kb / "times.md").read_text(encoding="utf-8") == note.replace("change me", "changed")
    run_tool(notebook, "edit_note", file_path="times.md", old_text="12: the old line", new_text="12: the new line")
    assert "12: the new line\n" in (kb / "times.md").read_text(encoding="utf-8")  # the note's own text first
    missed = run_tool(notebook, "edit_note", file_path="times.md", old_text="3: not there", new_text="x")
    assert missed.startswith("Error: old_text was not found in times.md (0 matches)")


@pytest.mark.parametrize("old_text, new_text, after", [
    ("4: - change me\n", "4: - changed\n- added\n", "# T\n\n- keep me\n- changed\n- added\n2023: Berlin\n"),
    ("3: - keep me\n4: - change me", "3: - kept\n4: 2024: Paris", "# T\n\n- kept\n2024: Paris\n2023: Berlin\n"),
    ("  4: - change me", "- changed", "# T\n\n- keep me\n- changed\n2023: Berlin\n"),  # from a search hit
    ("2024: Berlin", "2024: Paris", None),  # a year, not line 2024: the note's 2023 line stays
    ("4: - keep me", "x", None),  # line 4 does not hold it
    ("3: - keep me\n5: - change me", "x", None),  # not the note's lines in a row
])
def test_line_numbers_copied_with_a_passage_name_exactly_those_lines(notebook, kb, old_text, new_text, after):
    note = "# T\r\n\r\n- keep me\r\n- change me\r\n2023: Berlin\r\n"  # CRLF: kept where the lines were
    (kb / "t.md").write_bytes(note.encode())
    result = run_tool(notebook, "edit_note", file_path="t.md", old_text=old_text, new_text=new_text)
    if after is None:
        assert result.startswith("Error: old_text was not found in t.md") and (kb / "t.md").read_bytes() == note.encode()
    else:
        assert (kb / "t.md").read_bytes().replace(b"\r", b"") == after.encode(), result


def test_edit_keeps_crlf_and_bom_byte_for_byte(notebook, kb):
    original = codecs.BOM_UTF8 + "# 会议\r\n\r\n决定：十二月发布。\r\nAction: Bob\r\n".encode()
    (kb / "crlf.md").write_bytes(original)
    result = run_tool(notebook, "edit_note", file_path="crlf.md", old_text="决定：十二月发布。\nAction: Bob",
                 new_text="决定：一月发布。\nAction: Bob")
    assert not result.startswith("Error:"), result
    assert (kb / "crlf.md").read_bytes() == original.replace("十二月".encode(), "一月".encode())


def test_edit_with_missing_text_shows_the_closest_lines_and_changes_nothing(notebook, kb):
    (kb / "long.md").write_text(LONG_NOTE, encoding="utf-8")
    result = run_tool(notebook, "edit_note", file_path="long.md", old_text="Line 200: some text with a typo",
                 new_text="x")
    assert result.startswith("Error:") and "0 matches" in result
    assert "line 200: Line 200: sme text with a tpyo" in result
    assert (kb / "long.md").read_text(encoding="utf-8") == LONG_NOTE


def test_edit_with_ambiguous_text_says_how_many(notebook, kb):
    (kb / "todo.md").write_text("- [ ] call\n- [ ] write\n- [ ] call\n", encoding="utf-8")
    result = run_tool(notebook, "edit_note", file_path="todo.md", old_text="- [ ] call", new_text="- [x] call")
    assert result.startswith("Error:") and "2 times" in result
    assert (kb / "todo.md").read_text(encoding="utf-8") == "- [ ] call\n- [ ] write\n- [ ] call\n"


def test_overlapping_matches_count_as_ambiguous(notebook, kb):
    (kb / "a.md").write_text("aaa\n", encoding="utf-8")
    assert "2 times" in run_tool(notebook, "edit_note", file_path="a.md", old_text="aa", new_text="b")


@pytest.mark.parametrize("args, expected", [
    ({"file_path": "python.md", "old_text": "", "new_text": "x"}, "old_text is empty"),
    ({"file_path": "nope.md", "old_text": "a", "new_text": "b"}, "no such note"),  # as a private one
    ({"file_path": "python.md", "old_text": "Use venv", "new_text": "Use venv"}, "the same"),
])
def test_edit_refusals(notebook, kb, args, expected):
    before = (kb / "python.md").read_bytes()
    result = run_tool(notebook, "edit_note", **args)
    assert result.startswith("Error:") and expected in result
    assert (kb / "python.md").read_bytes() == before
    assert not (kb / ".history").exists()


def test_edit_of_a_non_utf8_note_is_refused(notebook, kb):
    (kb / "latin.md").write_bytes("café crème".encode("latin-1"))
    result = run_tool(notebook, "edit_note", file_path="latin.md", old_text="caf", new_text="tea")
    assert result.startswith("Error:") and "not UTF-8" in result
    assert (kb / "latin.md").read_bytes() == "café crème".encode("latin-1")


def test_empty_new_text_deletes_the_passage_recoverably(notebook, kb):
    run_tool(notebook, "edit_note", file_path="vim.md", old_text="`dd` deletes a line.\n", new_text="")
    assert (kb / "vim.md").read_text(encoding="utf-8") == "# Vim\n\n`:wq` saves and quits.\n"
    assert "`dd` deletes a line." in history_texts(kb, "vim.md")[0]


# --- append_note ---


def test_append_adds_a_line_at_the_end(notebook, kb):
    (kb / "journal.md").write_text("# Journal\n- Monday: rain", encoding="utf-8")  # no final newline
    result = run_tool(notebook, "append_note", file_path="journal.md", content="- Tuesday: sun")
    assert result.startswith("~ journal.md  +1 \u22120")
    assert (kb / "journal.md").read_text(encoding="utf-8") == "# Journal\n- Monday: rain\n- Tuesday: sun\n"


def test_append_to_a_missing_note_creates_it(notebook, kb):
    result = run_tool(notebook, "append_note", file_path="logs/meetings.md", content="## 12-01\nShip it.")
    assert result.startswith("+ logs/meetings.md  +2")
    assert (kb / "logs/meetings.md").read_text(encoding="utf-8") == "## 12-01\nShip it.\n"


def test_append_to_a_crlf_note_stays_crlf(notebook, kb):
    (kb / "w.md").write_bytes(b"a\r\nb\r\n")
    run_tool(notebook, "append_note", file_path="w.md", content="c\n")
    assert (kb / "w.md").read_bytes() == b"a\r\nb\r\nc\r\n"


# --- write_note ---


def test_overwrite_needs_the_flag_and_keeps_the_old_text(notebook, kb):
    before = (kb / "python.md").read_text(encoding="utf-8")
    refused = run_tool(notebook, "write_note", file_path="python.md", content="gone")
    assert refused.startswith("Error:") and "edit_note" in refused and "overwrite" in refused
    result = run_tool(notebook, "write_note", file_path="python.md", content="# Python\nShort now.\n", overwrite=True)
    assert result.startswith("~ python.md  +2 \u22124")
    assert history_texts(kb, "python.md") == [before]


def test_a_change_to_the_same_text_says_nothing_was_written(notebook, kb):
    before = (kb / "python.md").read_bytes()
    result = run_tool(notebook, "write_note", file_path="python.md", content=before.decode(), overwrite=True)
    assert "Nothing was written: python.md already holds exactly that text." in result, result
    assert "kept" not in result  # no version was made, so none is promised
    assert history_texts(kb, "python.md") == [] and (kb / "python.md").read_bytes() == before


def test_a_reorder_of_a_long_note_is_never_shown_as_no_change(notebook, kb):  # a red team's 32,000 lines
    (kb / "rep.md").write_text("a\nb\n" * 16_000, encoding="utf-8")
    result = run_tool(notebook, "write_note", file_path="rep.md", content="b\na\n" * 16_000, overwrite=True)
    assert result.splitlines()[0] == "~ rep.md  +0 \u22120, 16000 lines moved", result
    lines = [f"entry {i}\n" for i in range(6_000)]  # a block of 1,000 lines cut and pasted further down
    (kb / "log.md").write_text("".join(lines), encoding="utf-8")
    result = run_tool(notebook, "write_note", file_path="log.md", overwrite=True,
                      content="".join(lines[:1000] + lines[2000:5000] + lines[1000:2000] + lines[5000:]))
    assert result.splitlines()[0] == "~ log.md  +0 \u22120, 1000 lines moved", result
    (kb / "log.md").write_text("".join(lines), encoding="utf-8")
    result = run_tool(notebook, "write_note", file_path="log.md", content="".join(["new\n"] + lines[:-1]),
                      overwrite=True)
    assert result.splitlines()[0] == "~ log.md  +1 \u22121", result  # a line in at the top, one out at the end: no move


def test_overwrite_keeps_the_notes_bom_and_crlf(notebook, kb):
    (kb / "w.md").write_bytes(codecs.BOM_UTF8 + b"old\r\n")
    run_tool(notebook, "write_note", file_path="w.md", content="new\nlines\n", overwrite=True)
    assert (kb / "w.md").read_bytes() == codecs.BOM_UTF8 + b"new\r\nlines\r\n"


# --- move_note and delete_note ---


def test_move_and_delete_are_refused_when_nobody_can_confirm(notebook, kb):
    for name, args in (("move_note", {"from_path": "vim.md", "to_path": "editors/vim.md"}),
                       ("delete_note", {"file_path": "vim.md"})):
        result = run_tool(notebook, name, **args)
        assert result.startswith("Error:") and "--yes" in result and "AUTO_APPROVE=1" in result
    assert (kb / "vim.md").exists() and not (kb / "editors").exists()


def test_declined_confirmation_changes_nothing(notebook, kb):
    asked = []

    def no(approval):
        asked.append(approval.title)
        return False

    result = run_tool(notebook, "delete_note", ask=no, file_path="vim.md")
    assert result.startswith("Error:") and "declined" in result
    assert asked == ["Delete vim.md? (a copy is kept in .history/)"]
    assert (kb / "vim.md").exists()


def test_move_renames_and_never_replaces(notebook, kb):
    result = run_tool(notebook, "move_note", ask=yes, from_path="vim.md", to_path="editors/vim.md")
    assert result.startswith("→ vim.md → editors/vim.md")
    assert (kb / "editors/vim.md").read_text(encoding="utf-8").startswith("# Vim")
    refused = run_tool(notebook, "move_note", ask=yes, from_path="python.md", to_path="work/meeting.md")
    assert refused.startswith("Error:") and "already exists" in refused
    assert (kb / "work/meeting.md").read_text(encoding="utf-8").startswith("# Meeting")
    assert (kb / "python.md").exists()


def test_delete_keeps_a_copy(notebook, kb):
    before = (kb / "vim.md").read_text(encoding="utf-8")
    assert run_tool(notebook, "delete_note", ask=yes, file_path="vim.md").startswith("- vim.md")
    assert not (kb / "vim.md").exists()
    assert history_texts(kb, "vim.md") == [before]


def test_auto_approve_in_one_shot_mode_lets_delete_through(notebook, kb):
    assert terminal.Display(interactive=False).approve(approval.Approval("change", "Delete vim.md?")) is None
    assert run_tool(make_notebook(kb, auto_approve=True), "delete_note", file_path="vim.md").startswith("- vim.md")


# --- the path guard on every new argument, and the hidden history ---


@pytest.mark.parametrize("bad", ["../outside.md", "/etc/x.md", ".history/vim.md", "notes.py", "~/x.md"])
def test_every_path_argument_is_guarded(notebook, kb, bad):
    calls = [
        ("edit_note", {"file_path": bad, "old_text": "a", "new_text": "b"}),
        ("append_note", {"file_path": bad, "content": "x"}),
        ("move_note", {"from_path": bad, "to_path": "ok.md"}),
        ("move_note", {"from_path": "vim.md", "to_path": bad}),
        ("delete_note", {"file_path": bad}),
    ]
    for name, args in calls:
        result = run_tool(notebook, name, ask=yes, **args)
        assert result.startswith("Error:"), (name, args, result)
    assert (kb / "vim.md").exists() and not (kb.parent / "outside.md").exists()


def test_a_folder_named_like_a_note_is_refused_as_a_folder(notebook, kb):
    (kb / "d.md").mkdir()
    for name, args in (("write_note", {"file_path": "d.md", "content": "x", "overwrite": True}),
                       ("edit_note", {"file_path": "d.md", "old_text": "a", "new_text": "b"}),
                       ("append_note", {"file_path": "d.md", "content": "x"}),
                       ("move_note", {"from_path": "d.md", "to_path": "e.md"}),
                       ("delete_note", {"file_path": "d.md"})):
        assert "d.md is a folder, not a note." in run_tool(notebook, name, ask=yes, **args), name
    assert (kb / "d.md").is_dir() and not (kb / "e.md").exists()


def test_history_is_hidden_from_search_list_and_read(notebook, kb):
    run_tool(notebook, "write_note", file_path="python.md", content="rewritten\n", overwrite=True)
    run_tool(notebook, "delete_note", ask=yes, file_path="vim.md")
    assert ".history" not in run_tool(notebook, "list_notes")
    assert "python.md" not in run_tool(notebook, "search_notes", query="装饰器")  # only the old version has it
    assert "vim" not in run_tool(notebook, "search_notes", query="deletes")
    [kept] = versions.list_versions(kb, "vim.md")
    result = run_tool(notebook, "read_note", file_path=kept.relative_to(kb).as_posix())
    assert result.startswith("Error:")
    assert run_tool(notebook, "list_notes", folder=".history").startswith("Error:")


# --- undo through the tools ---


@pytest.mark.parametrize("name, args, check", [
    ("edit_note", {"file_path": "vim.md", "old_text": "`dd`", "new_text": "`D`"}, "vim.md"),
    ("write_note", {"file_path": "vim.md", "content": "new", "overwrite": True}, "vim.md"),
    ("append_note", {"file_path": "vim.md", "content": "more"}, "vim.md"),
    ("move_note", {"from_path": "vim.md", "to_path": "x/vim.md"}, "vim.md"),
    ("delete_note", {"file_path": "vim.md"}, "vim.md"),
])
def test_undo_after_each_change(notebook, kb, name, args, check):
    before = (kb / "vim.md").read_bytes()
    assert not run_tool(notebook, name, ask=yes, **args).startswith("Error:")
    message = notebook.undo()[0]
    assert message.startswith("Undid"), message
    assert (kb / "vim.md").read_bytes() == before
    assert not (kb / "x/vim.md").exists()


def test_undo_of_a_created_note_removes_it(notebook, kb):
    run_tool(notebook, "write_note", file_path="draft.md", content="draft\n")
    assert "removed draft.md" in notebook.undo()[0]
    assert not (kb / "draft.md").exists()
    assert notebook.undo()[0].startswith("Nothing to undo")


def folders(kb):
    return sorted(p.relative_to(kb).as_posix() for p in kb.rglob("*") if p.is_dir() and ".history" not in p.parts)


@pytest.mark.parametrize("name, args", [
    ("write_note", {"file_path": "work/new/deeper/ideas.md", "content": "idea\n"}),
    ("append_note", {"file_path": "work/new/deeper/ideas.md", "content": "idea"}),
    ("move_note", {"from_path": "vim.md", "to_path": "work/new/deeper/vim.md"}),
])
def test_undo_puts_back_the_folders_a_change_made(notebook, kb, name, args):
    (kb / "empty").mkdir()  # a folder the person made, empty, existed before: it stays
    before = folders(kb)
    assert not run_tool(notebook, name, ask=yes, **args).startswith("Error:")
    assert notebook.undo()[0].startswith("Undid")
    assert folders(kb) == before  # work/new/deeper and work/new are gone; work and empty stay

    run_tool(notebook, name, ask=yes, **args)
    (kb / "work/new/other.txt").write_text("another program's file")  # in a folder the change made
    assert notebook.undo()[0].startswith("Undid")
    assert folders(kb) == before + ["work/new"] and (kb / "work/new/other.txt").exists()


# --- the REPL ---


def test_repl_delete_then_undo_brings_the_note_back(monkeypatch, capsys, kb):
    notebook = make_notebook(kb)
    before = (kb / "vim.md").read_bytes()
    client = run_repl(monkeypatch, notebook, ["delete my vim note", "/undo", "thanks"], [
        {"tool_calls": [tool_call("delete_note", file_path="vim.md")]},
        {"content": "Deleted."},
        {"content": "You're welcome."},
    ], answers=["y"])
    err = capsys.readouterr().err
    assert "Delete vim.md? (a copy is kept in .history/) [y/N]" in err
    assert "  - vim.md" in err  # the change summary line
    assert "Undid the delete of vim.md" in err and "vim.md is back" in err
    assert (kb / "vim.md").read_bytes() == before
    # The model hears about the undo with the next question.
    assert "[I ran /undo: Undid the delete of vim.md" in client.requests[-1]["messages"][-1]["content"]


def test_repl_declined_delete_keeps_the_note(monkeypatch, capsys, kb):
    notebook = make_notebook(kb)
    run_repl(monkeypatch, notebook, ["delete vim"], [
        {"tool_calls": [tool_call("delete_note", file_path="vim.md")]},
        {"content": "OK, I left it."},
    ], answers=[""])
    assert (kb / "vim.md").exists()
    assert "declined" in capsys.readouterr().err


def test_repl_shows_a_summary_line_for_an_edit(monkeypatch, capsys, kb):
    notebook = make_notebook(kb)
    run_repl(monkeypatch, notebook, ["fix vim"], [
        {"tool_calls": [tool_call("edit_note", file_path="vim.md", old_text="`dd` deletes a line.",
                             new_text="`dd` deletes a line.\n`yy` copies a line.")]},
        {"content": "Done."},
    ])
    assert "  ~ vim.md  +1 \u22120" in capsys.readouterr().err


# --- end to end: main.py one-shot against the fake server (main.main in this process) ---


def test_one_shot_delete_needs_yes(call_main, fake_llm, kb):
    script = [{"tool_calls": [tool_call("delete_note", file_path="vim.md")]}, {"content": "Reported."}]
    fake_llm.replies = list(script)
    refused = call_main("delete my vim note", kb=kb, base_url=fake_llm.base_url)
    assert refused.returncode == 0 and (kb / "vim.md").exists()
    assert "--yes or AUTO_APPROVE=1" in fake_llm.requests[-1]["messages"][-1]["content"]
    fake_llm.replies = list(script)
    done = call_main("--yes", "delete my vim note", kb=kb, base_url=fake_llm.base_url)
    assert done.returncode == 0 and not (kb / "vim.md").exists()
    assert "  - vim.md" in done.stderr and "Traceback" not in done.stderr
    assert history_texts(kb, "vim.md")[0].startswith("# Vim")


def test_edit_across_lines_of_a_note_with_mixed_line_endings(notebook, kb):
    (kb / "mixed.md").write_bytes(b"# Mixed\r\nfrom windows\r\nfrom linux\nend\n")
    result = run_tool(notebook, "edit_note", file_path="mixed.md", old_text="from windows\nfrom linux",
                 new_text="from windows, fixed\nfrom linux")
    assert result.startswith("~ mixed.md  +1 \u22121"), result
    assert (kb / "mixed.md").read_bytes() == b"# Mixed\r\nfrom windows, fixed\r\nfrom linux\nend\n"


def test_undos_as_deep_as_the_version_limit_reach_the_original(notebook, kb, monkeypatch):
    monkeypatch.setattr(versions, "HISTORY_KEEP", 5)
    (kb / "count.md").write_text("v0\n", encoding="utf-8")
    for i in range(5):
        assert "~ count.md" in run_tool(notebook, "edit_note", file_path="count.md", old_text=f"v{i}",
                                        new_text=f"v{i + 1}")
    for _ in range(5):
        assert versions.undo_last(kb)[0].startswith("Undid")
    assert (kb / "count.md").read_text(encoding="utf-8") == "v0\n"


def test_a_missed_typo_fix_inside_a_long_line_is_shown_its_closest_line(notebook, kb):
    (kb / "fox.md").write_text("# Fox\n\nIn the morning the quick brwon fox jumps over the lazy dog, as always.\n"
                               "Nothing else here.\n", encoding="utf-8")
    result = run_tool(notebook, "edit_note", file_path="fox.md", old_text="quikk brwn fox", new_text="quick brown fox")
    assert "0 matches" in result and "line 3: In the morning the quick brwon fox" in result


def test_the_closest_lines_hint_is_bounded_on_any_note(notebook, kb, monkeypatch):
    """40,000 lines, or one huge line: only the first HINT_SCAN_CHARS are searched, and only a few pieces
    of them are compared closely (bench/edit_hint_bench.py times it)."""
    compared = []
    real = changing._likeness
    monkeypatch.setattr(changing, "_likeness", lambda piece, wanted: compared.append(piece) or real(piece, wanted))
    many = "".join(f"Line {i}: some text about topic {i}.\n" for i in range(40_000))
    (kb / "many.md").write_text(many, encoding="utf-8")
    result = run_tool(notebook, "edit_note", file_path="many.md", old_text="Line 700: some txet about topic 700.",
                 new_text="x")
    assert "line 701: Line 700: some text about topic 700." in result
    assert 0 < len(compared) <= changing.HINT_CANDIDATES
    far = "x" * changing.HINT_SCAN_CHARS + "\nthe quick brwon fox\n"
    (kb / "far.md").write_text(far, encoding="utf-8")
    result = run_tool(notebook, "edit_note", file_path="far.md", old_text="the quick brown fox", new_text="x")
    assert "0 matches" in result and "No line of the note looks like it" in result
