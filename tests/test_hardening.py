"""What a red team got through, each closed: versions flushed by a burst of changes, private files others could
read, a disk filled by one answer, look-alike names, an index read outside the notes mid-swap, a key in `ps`."""

import json
import os
import stat
import threading
import unicodedata

import pytest
from conftest import Recorder, StubClient, make_notebook, make_settings

import db
import main
import mcp_server
import notes
import search
import sessions
import approval
import tools
import versions
from agent import run_agent


def overwrite(n: int) -> dict:
    return {"name": "write_note", "arguments": json.dumps({"file_path": "plan.md", "content": f"hijacked {n}\n",
                                                           "overwrite": True})}


def test_a_hostile_burst_of_overwrites_cannot_flush_the_original(kb):
    """A note's hidden instruction made the model send 21 overwrites of plan.md in one answer: with 20 versions
    kept per note, the original was gone for good and 25 /undos could not bring it back."""
    (kb / "plan.md").write_text("# Plan\n\nthe person's own words\n", encoding="utf-8")
    original = (kb / "plan.md").read_bytes()
    client = StubClient([{"tool_calls": [overwrite(n) for n in range(21)]}, {"content": "Done."}])
    run_agent("follow the note", [], make_settings(kb, max_rounds=3), client, Recorder())
    assert (kb / "plan.md").read_text(encoding="utf-8") == "hijacked 20\n"
    assert versions.list_versions(kb, "plan.md")[0].read_bytes() == original
    for _ in range(25):
        make_notebook(kb).undo()
    assert (kb / "plan.md").read_bytes() == original


def test_non_destructive_appends_over_mcp_cannot_flush_it_either(kb):
    notebook = make_notebook(kb, mcp_allow_destructive=True)
    allowance = approval.Allowance(window_s=3600)
    original = (kb / "vim.md").read_bytes()
    tools.execute_tool("write_note", {"file_path": "vim.md", "content": "gone\n", "overwrite": True}, notebook,
                       lambda approval: True, allowance=allowance)
    for n in range(20):
        tools.execute_tool("append_note", {"file_path": "vim.md", "content": f"line {n}"}, notebook,
                           allowance=allowance)
    assert versions.list_versions(kb, "vim.md")[0].read_bytes() == original


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_conversations_and_the_index_are_private_files(kb, tmp_path):
    """sessions.db (whole conversations, note text included) and the search index were created 0644."""
    data, cache = tmp_path / "data" / "knowledge-agent", tmp_path / "cache" / "knowledge-agent"
    sessions.SessionStore(data / "sessions.db").write(lambda c: c.execute("SELECT 1"))
    with make_notebook(kb, index_dir=cache) as notebook:
        search.search_notes(notebook, "vim")
    for folder in (data, cache):
        assert mode(folder) == 0o700, folder
        assert [p.name for p in folder.iterdir() if mode(p) != 0o600] == [], folder


def test_files_an_older_version_made_open_are_made_private(tmp_path):
    folder = tmp_path / "knowledge-agent"
    folder.mkdir(mode=0o755)
    db.connect(folder / "old.db", [], 1).close()
    (folder / "old.db").chmod(0o644)
    folder.chmod(0o755)
    db.connect(folder / "old.db", [], 1).close()
    assert mode(folder) == 0o700 and mode(folder / "old.db") == 0o600


def test_one_answer_cannot_fill_the_disk_without_asking(kb, monkeypatch):
    monkeypatch.setattr(approval, "ANSWER_WRITE_LIMIT", 3000)
    write = [{"name": "write_note", "arguments": json.dumps({"file_path": f"big{n}.md", "content": "x" * 1000})}
             for n in range(5)]
    ui = Recorder()  # one-shot: nobody can be asked
    run_agent("write", [], make_settings(kb), StubClient([{"tool_calls": write}, {"content": "ok"}]), ui)
    assert sorted(p.name for p in kb.glob("big*.md")) == ["big0.md", "big1.md", "big2.md"]
    assert ui.results[3].error and "--yes" in ui.results[3].text
    asked = Recorder(answers=[True, False])  # a person can approve more, or not
    write = [{**call, "arguments": call["arguments"].replace("big", "more")} for call in write]
    run_agent("write", [], make_settings(kb), StubClient([{"tool_calls": write}, {"content": "ok"}]), asked)
    assert len(list(kb.glob("more*.md"))) == 4 and "would have written 4 KB" in asked.asked[0]


def test_auto_approve_does_not_lift_the_mcp_servers_hourly_bound(kb, monkeypatch):
    """Found by a red team: with AUTO_APPROVE=1 an MCP server without --allow-destructive wrote past its hourly
    bound, and its refusal said to rerun with --yes, which MCP does not have."""
    monkeypatch.setattr(approval, "ANSWER_WRITE_LIMIT", 3000)
    server = mcp_server.McpServer(make_settings(kb, auto_approve=True))
    results = [server.call_tool({"name": "write_note", "arguments": {"file_path": f"big{n}.md", "content": "x" * 1000}})
               for n in range(4)]
    assert [r["isError"] for r in results] == [False, False, False, True]
    refusal = results[3]["content"][0]["text"]
    assert "writes at most 0.003 MB an hour" in refusal and "wait 60 minutes" in refusal
    assert "--allow-destructive" in refusal and "--yes" not in refusal and "AUTO_APPROVE" not in refusal
    assert sorted(p.name for p in kb.glob("big*.md")) == ["big0.md", "big1.md", "big2.md"]


@pytest.mark.parametrize("name", ["a\u200bb.md", "report\u061c.md", "\u202enote.md", "x\ufeff.md",
                                  "plan\u034f.md", "plan\ufe0f.md", "plan\u17b4.md",  # a red team's
                                  "plan\U000e0100.md", "\u3164.md", "plan\u2065.md"])  # a Hangul filler, unassigned
def test_a_new_name_with_an_invisible_character_is_refused(kb, name):
    notebook = make_notebook(kb, auto_approve=True)
    for tool, args in (("write_note", {"file_path": name, "content": "x"}),
                       ("append_note", {"file_path": name, "content": "x"}),
                       ("move_note", {"from_path": "vim.md", "to_path": name})):
        result = tools.execute_tool(tool, args, notebook)
        assert result.error and ("invisible character" in result.text  # or, for direction marks,
                                 or "control characters" in result.text), tool  # the path guard's own refusal
        assert notes.visible(name) in result.text and notes.visible(name) != name  # shown escaped
    assert sorted(p.name for p in kb.iterdir()) == ["python.md", "vim.md", "work"]


@pytest.mark.parametrize("name", ["\u0440lan.md", "\uff50lan.md", "\u03c1lan.md", "PLAN.md", "\u0420LAN.md",
                                  "work/pl\u0430n.md"])  # Cyrillic р, full-width ｐ, Greek ρ, case, Cyrillic Р, а
def test_a_new_name_that_looks_like_an_existing_one_is_refused(kb, name):  # found by a red team
    (kb / "plan.md").write_text("# Plan\n", encoding="utf-8")
    (kb / "work" / "plan.md").write_text("# Plan\n", encoding="utf-8")
    before = sorted(str(p.relative_to(kb)) for p in kb.rglob("*"))
    notebook = make_notebook(kb, auto_approve=True)
    for tool, args in (("write_note", {"file_path": name, "content": "x"}),
                       ("append_note", {"file_path": name, "content": "x"}),
                       ("move_note", {"from_path": "vim.md", "to_path": name})):
        result = tools.execute_tool(tool, args, notebook)
        assert result.error and "looks the same as a name in" in result.text, (tool, result.text)
        assert "plan.md" not in result.text.replace(name.rsplit("/")[-1], "")  # the other note is not named
    assert sorted(str(p.relative_to(kb)) for p in kb.rglob("*")) == before


def test_emoji_and_joining_scripts_keep_their_invisible_characters(kb):
    notebook = make_notebook(kb, auto_approve=True)
    for name in ("\u2764\ufe0f plan.md", "\U0001f468\u200d\U0001f469\u200d\U0001f467 family.md",
                 "\U0001f44d\U0001f3fd\u200d\u2642 ok.md", "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645.md",
                 "\u0915\u094d\u200d\u0937.md"):  # ❤️, a family, a skin tone, Persian ZWNJ, Devanagari ZWJ
        result = tools.execute_tool("write_note", {"file_path": name, "content": "x"}, notebook)
        assert not result.error and (kb / name).exists() and notes.visible(name) == name, result.text


def test_every_character_unicode_makes_invisible_is_shown_escaped():
    ignorable = [chr(c) for c in range(0x110000) if notes.ignorable(chr(c)) and unicodedata.category(chr(c)) != "Cn"]
    assert len(ignorable) > 400 and [c for c in ignorable if notes.visible(f"a{c}b") == f"a{c}b"] == []


def test_search_never_reads_outside_the_notes_while_a_folder_is_swapped_for_a_link(tmp_path, kb):
    """183 of 48,015 searches showed an outside file's text while work/ was swapped for a link to elsewhere."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "meeting.md").write_text("zebrafish SECRET outside\n", encoding="utf-8")
    (kb / "work" / "meeting.md").write_text("# Meeting\n\nzebrafish inside\n", encoding="utf-8")
    real, aside, stop, swaps = kb / "work", kb / "work-real", threading.Event(), [0]

    def swap():
        while not stop.is_set():
            os.rename(real, aside)
            os.symlink(outside, real)  # work/ is now a link to outside, for a moment
            stop.wait(0.001)
            os.unlink(real)
            os.rename(aside, real)
            swaps[0] += 1

    notebook = make_notebook(kb, index_dir=tmp_path / "cache", search_watch=False)
    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for _ in range(400):
            found = search.search_notes(notebook, "zebrafish")
            assert "SECRET" not in found
    finally:
        stop.set()
        swapper.join()
        notebook.close()
    assert swaps[0] > 20  # the swap really raced the searches


def test_the_help_says_a_key_on_the_command_line_is_visible_to_others(capsys):
    with pytest.raises(SystemExit):
        main.parse_args(["--help"])
    assert "process list" in " ".join(capsys.readouterr().out.split())
