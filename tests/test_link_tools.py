"""The vault's link graph in the app: the link index beside the search index, the `links` tool and /links, what
delete_note says it breaks, and move_note keeping every link of the notes leading where it led (through the
chat's tools, the one-shot command line and the MCP server), undone byte for byte, refused when a note changed
under it, and recoverable after a kill between two writes.

Every move is checked the way the issue asks: links.resolve_all over every file before and after must agree, with
the moved note under its new name, and files the move need not touch keep every byte."""

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

import diffs
import links
import terminal
import reading
import tools
import versions
from conftest import McpProcess, call, child_env, make_notebook, run_repl, server_env, write

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def vault(tmp_path) -> Path:
    """A small vault: a book note, three notes linking to it in most forms, a canvas and an attachment."""
    kb = tmp_path / "vault"
    write(kb, "读书/三体.md", "# 三体\n\n作者 [[刘慈欣]]，见 [书单](../书单.md) 和 ![[封面.png]]。\n")
    write(kb, "书单.md", "---\nrelated: \"[[三体]]\"\n---\n# 书单\n\n- [[三体]] and [[三体#人物|人物]]\n"
                       "- [三体](读书/三体.md)\n- `[[三体]]` in code, %%[[三体]]%% in a comment\n\n"
                       "| 书 | 注 |\n|---|---|\n| [[三体\\|刘慈欣的书]] | ok |\n")
    write(kb, "人物/刘慈欣.md", "# 刘慈欣\n\n写了 [[读书/三体]] 和 ![[三体#第一部]]\n")
    write(kb, "无关.md", "# 无关\n\nNothing links from here. [[刘慈欣]]\n")
    write(kb, "板.canvas", json.dumps({"nodes": [{"id": "1", "type": "file", "file": "读书/三体.md"}], "edges": []},
                                    ensure_ascii=False))
    write(kb, "读书/封面.png", b"\x89PNG\r\n\x1a\n")
    return kb.resolve()


def every_file(kb: Path) -> dict:
    """Every file of the vault outside hidden folders: path -> its text for notes and canvases, else None."""
    found = {}
    for path in sorted(kb.rglob("*")):
        rel = path.relative_to(kb).as_posix()
        if path.is_file() and not any(part.startswith(".") for part in rel.split("/")):
            found[rel] = path.read_bytes().decode("utf-8", "replace") if rel.endswith((".md", ".canvas")) else None
    return found


def hashes(kb: Path) -> dict:
    """A hash of every file but the history, to compare the whole folder byte for byte."""
    return {path.relative_to(kb).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in kb.rglob("*") if path.is_file() and ".history" not in path.parts}


def expected_after(before: dict, src: str, dst: str) -> dict:
    """What resolve_all must say after moving src to dst: the same links leading to the same files, renamed."""
    rename = {src: dst}
    return {(rename.get(source, source), i): rename.get(target, target)
            for (source, i), target in links.resolve_all(before).items()}


def moved(kb: Path, src: str, dst: str, **changes) -> str:
    """move_note through execute_tool, approved by --yes unless `ask` is given; its result's text, checked."""
    before, old = every_file(kb), hashes(kb)
    ask = changes.pop("ask", None)
    result = tools.execute_tool("move_note", {"from_path": src, "to_path": dst},
                                make_notebook(kb, auto_approve=ask is None, **changes), ask=ask)
    assert not result.error, result.text
    assert links.resolve_all(every_file(kb)) == expected_after(before, src, dst)
    new = hashes(kb)
    changed = {path for path in old if path != src and new.get(path) != old[path]}
    summary = result.text.splitlines()
    assert summary[0] == f"→ {src} → {dst}"
    assert changed == {line[2:].rsplit("  ", 1)[0] for line in summary if line.startswith("~ ")} - {dst}
    return result.text


def undone(kb: Path, old: dict) -> None:
    message, done = make_notebook(kb).undo()
    assert done, message
    assert hashes(kb) == old


# --- The links tool, /links, and what a delete breaks ---

def test_links_lists_where_each_link_leads_and_every_backlink(vault):
    text = tools.execute_tool("links", {"file_path": "读书/三体.md"}, make_notebook(vault)).text
    assert text.splitlines() == [
        "读书/三体.md: 3 links out; 7 links from 2 notes lead here.", "",
        "Links out (line: target as written → the file it leads to):",
        "  3: 刘慈欣 → 人物/刘慈欣.md", "  3: ../书单.md → 书单.md", "  3: !封面.png → 读书/封面.png", "",
        "Backlinks (note:line):",
        "  书单.md:2", "  书单.md:6 (2 links)", "  书单.md:7", "  书单.md:12", "  人物/刘慈欣.md:3 (2 links)"]


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "stat"])
def test_the_link_index_is_as_fresh_as_the_search_index(vault, watch):
    notebook = make_notebook(vault, search_watch=watch)

    def shown(path):
        return tools.execute_tool("links", {"file_path": path}, notebook).text

    assert "unresolved" not in shown("读书/三体.md") and "0 links from 0 notes lead here" in shown("无关.md")
    write(vault, "新.md", "[[无关]] [[缺的图.png]]\n")  # made, then edited, by another program
    assert "  新.md:1" in shown("无关.md") and "缺的图.png → unresolved" in shown("新.md")
    write(vault, "读书/缺的图.png", b"GIF89a")  # an attachment appears: the link now leads to it
    assert "缺的图.png → 读书/缺的图.png" in shown("新.md")
    write(vault, "新.md", "no more links\n")
    assert "新.md" not in shown("无关.md")
    (vault / "人物/刘慈欣.md").unlink()
    assert "人物/刘慈欣.md" not in shown("读书/三体.md") and "刘慈欣 → unresolved" in shown("读书/三体.md")


def test_links_is_bounded_and_says_how_many_more(vault):
    for n in range(400):
        write(vault, f"many/note {n:03}.md", "[[三体]] " * 5 + "\n")
    text = tools.execute_tool("links", {"file_path": "读书/三体.md"}, make_notebook(vault)).text
    assert len(text) <= reading.MAX_TOOL_OUTPUT and "; 2007 links from 402 notes lead here." in text
    shown = text.count("\n  many/")
    assert text.endswith(f"\n  [… {2007 - 5 * shown} more backlinks from {402 - shown} notes not shown]")
    assert "  3: 刘慈欣 → 人物/刘慈欣.md" in text and "  many/note 000.md:1 (5 links)" in text


def test_links_of_what_is_no_note_is_a_clear_error(vault):
    notebook = make_notebook(vault)
    assert tools.execute_tool("links", {"file_path": "nope.md"}, notebook).text.startswith("Error: no such note.")
    assert "not a note" in tools.execute_tool("links", {"file_path": "板.canvas"}, notebook).text
    assert "outside" in tools.execute_tool("links", {"file_path": "../x.md"}, notebook).text


def test_the_links_command_runs_without_the_model(call_main, vault):
    result = call_main(kb=vault, key=None, stdin="/links 读书/三体.md\n/links\n/links nope.md\n")
    assert result.stdout.startswith("读书/三体.md: 3 links out; 7 links from 2 notes lead here.")
    assert "Usage: /links PATH" in result.stderr and "no such note. Use /search or /list" in result.stderr
    assert result.returncode == 1 and "Traceback" not in result.stderr


def test_delete_says_which_notes_link_to_the_note_in_its_question_and_result(vault):
    asked = []
    result = tools.execute_tool("delete_note", {"file_path": "读书/三体.md"}, make_notebook(vault),
                                ask=lambda approval: asked.append(approval.title) or True)
    assert asked == ["Delete 读书/三体.md? (a copy is kept in .history/) 2 notes link here: 书单.md, 人物/刘慈欣.md."]
    assert result.text.endswith("brings it back. 2 notes link here: 书单.md, 人物/刘慈欣.md.")
    for n in range(7):
        write(vault, f"n{n}.md", "[[刘慈欣]]\n")
    result = tools.execute_tool("delete_note", {"file_path": "人物/刘慈欣.md"}, make_notebook(vault, auto_approve=True))
    assert result.text.endswith("8 notes link here: n0.md, n1.md, n2.md, n3.md, n4.md, ….")
    result = tools.execute_tool("delete_note", {"file_path": "无关.md"}, make_notebook(vault, auto_approve=True))
    assert result.text.endswith("brings it back.")


# --- Moves that keep every link ---

def test_a_move_rewrites_only_link_targets_and_one_undo_puts_every_byte_back(vault):
    old = hashes(vault)
    asked = []
    text = moved(vault, "读书/三体.md", "科幻/长篇/三体-刘慈欣.md", ask=lambda approval: asked.append(approval) or True)
    assert asked[0].title == "Move 读书/三体.md to 科幻/长篇/三体-刘慈欣.md and update 9 links in 4 files?"
    assert [title for title, _ in diffs.diffs(asked[0].change)] == [
        "读书/三体.md → 科幻/长篇/三体-刘慈欣.md", "书单.md", "人物/刘慈欣.md", "板.canvas"]
    assert text.splitlines()[-1].startswith("Moved 读书/三体.md to 科幻/长篇/三体-刘慈欣.md and updated 9 links in 4 "
                                            "files so that they still lead to it")
    assert (vault / "书单.md").read_text(encoding="utf-8") == (
        "---\nrelated: \"[[三体-刘慈欣]]\"\n---\n# 书单\n\n- [[三体-刘慈欣]] and [[三体-刘慈欣#人物|人物]]\n"
        "- [三体](科幻/长篇/三体-刘慈欣.md)\n- `[[三体]]` in code, %%[[三体]]%% in a comment\n\n"
        "| 书 | 注 |\n|---|---|\n| [[三体-刘慈欣\\|刘慈欣的书]] | ok |\n")
    assert (vault / "科幻/长篇/三体-刘慈欣.md").read_text(encoding="utf-8") == (  # its relative link, one level deeper
        "# 三体\n\n作者 [[刘慈欣]]，见 [书单](../../书单.md) 和 ![[封面.png]]。\n")
    assert '"file": "科幻/长篇/三体-刘慈欣.md"' in (vault / "板.canvas").read_text(encoding="utf-8")
    undone(vault, old)
    assert not (vault / "科幻").exists()


def test_a_move_where_no_link_leads_changes_nothing_else(vault):
    old = hashes(vault)
    text = moved(vault, "无关.md", "归档/无关.md")
    assert text.splitlines() == ["→ 无关.md → 归档/无关.md",
                                 "Moved 无关.md to 归档/无关.md; no link needed changing; /undo in the chat moves it back."]
    undone(vault, old)


def test_every_link_form_follows_the_note(vault):
    write(vault, "每种.md", "---\naliases: [x]\nup:\n  - \"[[三体]]\"\n---\n[[三体.md]] [[三体#^blk-1]] [[三体#第一部#人物]] "
                          "![[三体|300]] [[ 三体 ]] [t](<读书/三体.md>) [t](%E8%AF%BB%E4%B9%A6/%E4%B8%89%E4%BD%93.md) "
                          "[t](/读书/三体.md#人物 \"title\") [![i](读书/封面.png)](读书/三体.md) [[读书/三体\\|表]]\n"
                          "```\n[[三体]]\n```\n~~~\n[[三体]]\n~~~\n%%\n[[三体]]\n")
    old = hashes(vault)
    moved(vault, "读书/三体.md", "科幻 小说/三体 全集.md")
    assert (vault / "每种.md").read_text(encoding="utf-8") == (
        "---\naliases: [x]\nup:\n  - \"[[三体 全集]]\"\n---\n[[三体 全集.md]] [[三体 全集#^blk-1]] [[三体 全集#第一部#人物]] "
        "![[三体 全集|300]] [[三体 全集]] [t](<科幻 小说/三体 全集.md>) "
        "[t](%E7%A7%91%E5%B9%BB%20%E5%B0%8F%E8%AF%B4/%E4%B8%89%E4%BD%93%20%E5%85%A8%E9%9B%86.md) "
        "[t](科幻%20小说/三体%20全集.md#人物 \"title\") [![i](读书/封面.png)](科幻%20小说/三体%20全集.md) "
        "[[三体 全集\\|表]]\n```\n[[三体]]\n```\n~~~\n[[三体]]\n~~~\n%%\n[[三体]]\n")
    undone(vault, old)


def test_two_notes_of_one_name_and_the_same_folder_rule(tmp_path):
    kb = tmp_path / "kb"
    write(kb, "a/三体.md", "A\n")
    write(kb, "b/三体.md", "B\n")
    write(kb, "b/笔记.md", "[[三体]] means the one beside me\n")
    write(kb, "索引.md", "[[三体]] means the first of the shortest paths; [[b/三体]] the other\n")
    kb = kb.resolve()
    old = hashes(kb)
    moved(kb, "a/三体.md", "归档/旧/三体.md")  # [[三体]] would now mean b/三体.md: written in full instead
    assert (kb / "索引.md").read_text(encoding="utf-8") == \
        "[[归档/旧/三体]] means the first of the shortest paths; [[b/三体]] the other\n"
    assert hashes(kb)["b/笔记.md"] == old["b/笔记.md"]
    undone(kb, old)
    moved(kb, "b/笔记.md", "a/笔记.md")  # now beside the other 三体
    assert (kb / "a/笔记.md").read_text(encoding="utf-8") == "[[b/三体]] means the one beside me\n"


def test_case_differences_and_a_newcomer_that_would_steal_links(tmp_path):
    kb = tmp_path / "kb"
    write(kb, "notes/Santi.md", "x\n")
    write(kb, "a.md", "[[SANTI]] and [[santi.MD|s]] and [x](notes/SANTI.md)\n")
    write(kb, "deep/er/other.md", "y\n")
    write(kb, "b.md", "[[other]] leads to deep/er/other.md\n")
    kb = kb.resolve()
    moved(kb, "notes/Santi.md", "Santi Chen.md")
    assert (kb / "a.md").read_text() == "[[Santi Chen]] and [[Santi Chen.md|s]] and [x](Santi%20Chen.md)\n"
    moved(kb, "a.md", "other.md")  # a shorter other.md would take [[other]] from deep/er/other.md
    assert (kb / "b.md").read_text() == "[[deep/er/other]] leads to deep/er/other.md\n"


def test_a_name_no_link_can_hold_or_a_look_alike_of_another_note_is_refused(tmp_path):
    kb = tmp_path / "kb"
    write(kb, "a.md", "see [[b]] here\n")
    write(kb, "b.md", "# b\n")
    write(kb, "Other.md", "# other\n")
    write(kb, "café.md", "# café\n")
    kb = kb.resolve()
    old = hashes(kb)
    notebook = make_notebook(kb, auto_approve=True)
    move = lambda dst: tools.execute_tool("move_note", {"from_path": "b.md", "to_path": dst}, notebook)  # noqa: E731
    assert "the link to b].md in a.md (line 1) cannot be written" in move("b].md").text  # [[b]]] is [[b]] and ']'
    for twin in ("oTHER.md", unicodedata.normalize("NFD", "café.md"), "OTHER.md/x.md"):
        for result in (move(twin), tools.execute_tool("write_note", {"file_path": twin, "content": "x"}, notebook)):
            assert result.error and "looks the same as a name in the top folder" in result.text, result.text
    write(kb, "Secret-Plans.md", "---\nprivate: true\n---\nplans\n")
    write(kb, "Diary/d.md", "dear diary\n")
    write(kb, ".kaignore", "Diary/\n")
    for private in ("secret-plans.md", "diary/new.md"):  # as a public note's twin: a private name is told to nobody
        result = tools.execute_tool("write_note", {"file_path": private, "content": "x"}, notebook)
        assert result.error and "looks the same as a name in the top folder" in result.text, result.text
        assert "Secret" not in result.text and "Diary" not in result.text
    old = hashes(kb)
    moved(kb, "b.md", "B.md")  # a case-only rename of the note itself is no look-alike; [[b]] still leads to it
    assert (kb / "B.md").exists() and not (kb / "b.md").exists()


def test_relative_and_absolute_link_formats_of_the_vault_are_followed(vault):
    write(vault, ".obsidian/app.json", '{"newLinkFormat": "relative"}')
    moved(vault, "读书/三体.md", "科幻/三体.md")
    assert (vault / "人物/刘慈欣.md").read_text(encoding="utf-8") == "# 刘慈欣\n\n写了 [[../科幻/三体]] 和 ![[三体#第一部]]\n"
    write(vault, ".obsidian/app.json", '{"newLinkFormat": "absolute"}')
    moved(vault, "科幻/三体.md", "科幻/三体2.md")
    assert "[[科幻/三体2]]" in (vault / "人物/刘慈欣.md").read_text(encoding="utf-8")


def test_each_note_keeps_its_encoding_bom_and_line_endings(vault):
    write(vault, "gbk.md", "# 国标\r\n\r\n见 [[三体]]。\r\n", encoding="gbk")
    write(vault, "bom.md", "\ufeff# BOM\r\n[[三体]]\n", encoding="utf-8")  # mixed endings stay as they are
    write(vault, "utf16.md", "\ufeff[[三体]] 👍\r\n", encoding="utf-16-le")
    old = hashes(vault)
    moved(vault, "读书/三体.md", "三体 (刘).md")
    assert (vault / "gbk.md").read_bytes() == "# 国标\r\n\r\n见 [[三体 (刘)]]。\r\n".encode("gbk")
    assert (vault / "bom.md").read_bytes() == "\ufeff# BOM\r\n[[三体 (刘)]]\n".encode("utf-8")
    assert (vault / "utf16.md").read_bytes() == "\ufeff[[三体 (刘)]] 👍\r\n".encode("utf-16-le")
    undone(vault, old)


def test_a_linking_note_that_cannot_be_rewritten_faithfully_stops_the_move(vault):
    write(vault, "latin.md", b"caf\xe9 [[" + "三体".encode() + b"]]\n")  # neither UTF-8 nor GBK
    old = hashes(vault)
    result = tools.execute_tool("move_note", {"from_path": "读书/三体.md", "to_path": "x.md"},
                                make_notebook(vault, auto_approve=True))
    assert result.error and "latin.md links to 读书/三体.md but is not text that can be changed" in result.text
    assert hashes(vault) == old


def test_a_note_edited_during_review_stops_the_move_and_says_which(vault):
    old = hashes(vault)

    def edit_then_accept(approval):
        write(vault, "书单.md", (vault / "书单.md").read_text(encoding="utf-8") + "- a line of mine\n")
        return True

    result = tools.execute_tool("move_note", {"from_path": "读书/三体.md", "to_path": "x.md"},
                                make_notebook(vault), ask=edit_then_accept)
    assert result.error and "书单.md changed while the person was reviewing the change, so nothing was written" \
        in result.text
    assert hashes(vault) == {**old, "书单.md": hashes(vault)["书单.md"]} and (vault / "读书/三体.md").exists()


def test_a_note_that_comes_to_link_here_during_review_stops_the_move(vault):
    def link_then_accept(approval):
        write(vault, "新.md", "[[三体]]\n")
        return True

    result = tools.execute_tool("move_note", {"from_path": "读书/三体.md", "to_path": "x.md"},
                                make_notebook(vault), ask=link_then_accept)
    assert result.error and "新.md changed on disk after the change was planned, so nothing was written. read_note it" in result.text
    assert (vault / "读书/三体.md").exists() and not (vault / "x.md").exists()


def test_with_yes_a_note_edited_after_the_plan_is_planned_again(vault, monkeypatch):
    plan_move, planned = versions.plan_move, []

    def plan_then_someone_edits(kb, src, dst, rewritten=None):
        change = plan_move(kb, src, dst, rewritten)
        if not planned:  # between the plan and the write, under nobody's lock: an editor saves the note
            write(vault, "人物/刘慈欣.md", "# 刘慈欣\n\n写了 [[读书/三体]]，也写了 [[三体|球状闪电]]\n")
        planned.append(change)
        return change

    monkeypatch.setattr(versions, "plan_move", plan_then_someone_edits)
    result = tools.execute_tool("move_note", {"from_path": "读书/三体.md", "to_path": "三体新.md"},
                                make_notebook(vault, auto_approve=True))
    assert not result.error and len(planned) == 2
    assert (vault / "人物/刘慈欣.md").read_text(encoding="utf-8") == \
        "# 刘慈欣\n\n写了 [[三体新]]，也写了 [[三体新|球状闪电]]\n"


KILLED_MIDWAY = """
import os, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
import tools, versions
from conftest import make_notebook
real, written = versions.write_bytes, []

def write_then_wait(kb, path, data, **kw):  # the second note's write never comes: the parent kills us first
    if not path.startswith(".history"):
        if written:
            print("one note written", flush=True)
            time.sleep(600)
        written.append(path)
    real(kb, path, data, **kw)

versions.write_bytes = write_then_wait
tools.execute_tool("move_note", {{"from_path": "读书/三体.md", "to_path": "科幻/三体.md"}},
                   make_notebook(Path({kb!r}), auto_approve=True))
"""


def test_a_kill_between_two_writes_leaves_what_undo_puts_back(vault, tmp_path):
    old = hashes(vault)
    script = tmp_path / "killed.py"
    script.write_text(KILLED_MIDWAY.format(root=str(ROOT), kb=str(vault)))
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                             env=child_env(PYTHONPATH=str(ROOT / "tests")))
    assert child.stdout.readline() == "one note written\n"
    child.send_signal(signal.SIGKILL)
    child.wait()
    half = hashes(vault)
    assert "科幻/三体.md" in half and "读书/三体.md" not in half  # moved, and one linking note rewritten of three
    assert sum(half.get(path) != digest for path, digest in old.items()) == 2
    undone(vault, old)


def test_the_terminal_lists_the_files_a_move_touches_under_its_question(vault, monkeypatch, capsys):
    old = hashes(vault)
    run_repl(monkeypatch, make_notebook(vault), ["rename it", "/undo"], [
        call("move_note", from_path="读书/三体.md", to_path="三体新.md"), {"content": "Moved."}],
        answers=["y"])
    err = capsys.readouterr().err
    files = "→ 读书/三体.md → 三体新.md|~ 三体新.md  +1 −1|~ 书单.md  +4 −4|~ 人物/刘慈欣.md  +1 −1|~ 板.canvas  +1 −1"
    assert ("Move 读书/三体.md to 三体新.md and update 9 links in 4 files?\n    " + files.replace("|", "\n    ")
            + "\n [y/N]   " + files.replace("|", "\n  ") + "\n") in err  # the question, then what was written
    assert "Undid the move of 读书/三体.md → 三体新.md" in err and "3 other notes are back as they were" in err
    assert hashes(vault) == old


def test_a_question_lists_at_most_twenty_files_and_says_how_many_more(vault):
    for n in range(30):
        write(vault, f"n{n:02}.md", "[[三体]]\n")
    change = versions.plan_move(vault, "读书/三体.md", "x.md", {f"n{n:02}.md": b"[[x]]\n" for n in range(30)})
    listed = terminal.touched(change).split("\n    ")
    assert listed[1:3] == ["→ 读书/三体.md → x.md", "~ n00.md  +1 −1"] and listed[-1] == "… and 11 more\n"
    assert len(listed) == 1 + terminal.QUESTION_FILES + 1


def test_one_shot_yes_moves_with_every_link_and_undo_puts_it_back(call_main, fake_llm, vault):
    fake_llm.replies = [call("move_note", from_path="读书/三体.md", to_path="科幻/三体.md"), {"content": "Done."}]
    before, old = every_file(vault), hashes(vault)
    refused = call_main("move it", kb=vault, base_url=fake_llm.base_url)
    assert "rerun with --yes" in refused.stderr and hashes(vault) == old
    fake_llm.replies = [call("move_note", from_path="读书/三体.md", to_path="科幻/三体.md"), {"content": "Done."}]
    result = call_main("--yes", "move it", kb=vault, base_url=fake_llm.base_url)
    assert result.returncode == 0 and result.stdout == "Done.\n", result.stderr
    assert "→ 读书/三体.md → 科幻/三体.md\n  ~ 书单.md  +1 −1\n  ~ 人物/刘慈欣.md  +1 −1\n  ~ 板.canvas" in result.stderr
    assert links.resolve_all(every_file(vault)) == expected_after(before, "读书/三体.md", "科幻/三体.md")
    result = call_main("/undo", kb=vault, key=None)
    assert "Undid the move of 读书/三体.md → 科幻/三体.md" in result.stderr and hashes(vault) == old


def test_mcp_moves_with_every_link_and_serves_links_as_read_only(vault, tmp_path):
    before, old = every_file(vault), hashes(vault)
    server = McpProcess(vault, "--allow-destructive", env=server_env(KA_INDEX_DIR=str(tmp_path / "index")))
    server.initialize()
    listed = {tool["name"]: tool for tool in server.request("tools/list")["result"]["tools"]}
    assert listed["links"]["annotations"] == {"readOnlyHint": True}
    assert server.call("links", {"file_path": "读书/三体.md"})["content"][0]["text"].startswith(
        "读书/三体.md: 3 links out; 7 links from 2 notes lead here.")
    result = server.call("move_note", {"from_path": "读书/三体.md", "to_path": "科幻/三体.md"})
    assert not result["isError"] and "and updated 3 links in 3 files" in result["content"][0]["text"]
    assert links.resolve_all(every_file(vault)) == expected_after(before, "读书/三体.md", "科幻/三体.md")
    assert server.close() == 0 and "Traceback" not in server.stderr()
    undone(vault, old)


def test_renaming_the_most_linked_note_of_a_real_vault_keeps_every_link(garden, tmp_path):
    kb = Path(shutil.copytree(garden, tmp_path / garden.name))
    before, old = every_file(kb), hashes(kb)
    inbound = {}
    for (source, _), target in links.resolve_all(before).items():
        if target and target != source:
            inbound[target] = inbound.get(target, 0) + 1
    most = max(inbound, key=inbound.get)
    text = moved(kb, most, most[:-3] + " (renamed).md")
    assert " and updated " in text
    undone(kb, old)
