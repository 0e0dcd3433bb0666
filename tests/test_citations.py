"""Citations checked after each answer, with no model call: against the notes and against what the tools showed the
model, through run_agent and the real tools (the stub client plays the model), and as the terminal shows them."""

import dataclasses

import pytest

import citations
import notes
import tools
from agent import run_agent
from conftest import Recorder, StubClient, Terminal, call, child_env, make_settings, posix_only



def answered(settings, replies: list, history: list | None = None, question: str = "q"):
    """run_agent with the model's replies scripted: the answer, and the conversation after it."""
    history = [] if history is None else history
    return run_agent(question, history, settings, StubClient(replies), Recorder()), history


def problems(answer) -> dict:
    return {check.text: check.problem for check in answer.citations.checks}


def test_each_citation_is_checked_against_the_note_and_what_the_model_read(settings):
    answer, _ = answered(settings, [call("read_note", file_path="python.md"), {"content": (
        'Your note says "装饰器 很有用" (python.md:3). Also python.md:99, ghost.md:2 and vim.md:3.\n'
        '"Use uv for projects" python.md:4, and 「USE venv … projects」 python.md:2-4.')}])
    assert problems(answer) == {
        "python.md:3": "",
        "python.md:99": "the note has 4 lines",
        "ghost.md:2": "no such note",
        "vim.md:3": "its text never reached the model in this conversation",
        "python.md:4": "the quoted text is not there",
        "python.md:2-4": "",
    }
    assert answer.citations.failed() == [
        "python.md:99 — the note has 4 lines", "ghost.md:2 — no such note",
        "vim.md:3 — its text never reached the model in this conversation",
        "python.md:4 — the quoted text is not there"]
    assert answer.citations.unread == ""  # a note was read for it


def test_lines_a_search_showed_reached_the_model_and_the_others_did_not(settings):
    answer, history = answered(settings, [call("search_notes", query="venv"), {"content": (
        'python.md:4 says "use venv for projects"; python.md:2-3 and python.md:1 are not what it read.')}])
    assert "  4: Use venv for projects." in history[2]["content"]  # what the search showed, and nothing more of it
    assert problems(answer) == {"python.md:4": "", "python.md:2-3": "lines 2-3 never reached the model",
                                "python.md:1": "line 1 never reached the model"}


def test_a_note_the_model_never_read_fails_before_its_length_or_words_are_told(settings):
    """As for a private note: the check is local, and still says nothing of the note's content."""
    answer, _ = answered(settings, [call("read_note", file_path="python.md"),
                                    {"content": 'vim.md:99 says "nothing like this"; "dd" (vim.md).'}])
    assert problems(answer) == {"vim.md:99": citations.NEVER_SHOWN, "vim.md": citations.NEVER_SHOWN}


def test_an_invented_note_quoted_without_any_tool_call_is_caught(settings):
    answer, _ = answered(settings, [{"content": 'Your notes say "@wraps keeps the name" in python-decorators.md.'}])
    assert answer.citations.failed() == ["python-decorators.md — no such note"]
    assert answer.citations.unread == "No note was read for this answer, yet it speaks of your notes."


@pytest.mark.parametrize("reply, unread", [
    ("Hello! Ask me about your notes.", True),  # "your notes" with no tool call
    ("python.md covers Python.", True),  # names a note no tool named
    ("Hello, how can I help?", False),
    ("You could call it git-tips.md if you like.", True),  # a path, with no tool call at all
    ("根据我的笔记，文件保存在 Google Drive。", True),  # Qwen2.5-Coder-0.5B, speaking as the person, read nothing
    ("According to my notes, water them daily.", True),
    ("我的知识库里没有这个。", True),
])
def test_an_answer_about_the_notes_with_none_read_says_so(settings, reply, unread):
    answer, _ = answered(settings, [{"content": reply}])
    assert bool(answer.citations.unread) is unread


def test_what_counts_as_reading_in_a_turn(settings, kb):
    # listing names notes but shows none of their text: naming one it listed is no claim about its words
    answer, history = answered(settings, [call("list_notes"), {"content": "You have python.md and vim.md."}])
    assert answer.citations.unread == ""
    # a later turn resting on what an earlier one read is told so, with that nuance
    answer, history = answered(settings, [call("read_note", file_path="vim.md"), {"content": "ok"}], history)
    answer, history = answered(settings, [{"content": '"dd" deletes a line (vim.md:3).'}], history)
    assert problems(answer) == {"vim.md:3": ""}
    assert answer.citations.unread == citations.UNREAD + citations.READ_BEFORE
    # a note it just wrote is named, not cited
    answer, _ = answered(make_settings(kb, auto_approve=True), [
        call("write_note", file_path="git.md", content="# Git\n"), {"content": "I wrote git.md for you."}])
    assert answer.citations == citations.NOTHING


def test_code_blocks_link_targets_and_glued_chinese_are_read_as_a_person_reads_them(settings):
    answer, _ = answered(settings, [call("read_note", file_path="python.md"), {"content": (
        "见python.md:3「装饰器很有用」。\n```\nghost.md:1\n```\n[python.md：4](python.md) and ./python.md:1")}])
    assert [(c.text, c.path, c.start, c.problem) for c in answer.citations.checks] == [
        ("python.md:3", "python.md", 3, ""), ("python.md：4", "python.md", 4, ""), ("./python.md:1", "python.md", 1, "")]


def test_chinese_and_symbol_names_are_cited_whole(settings, kb):
    (kb / "C++.md").write_text("# C++\nTemplates.\n", encoding="utf-8")
    answer, _ = answered(settings, [call("read_note", file_path="python.md"), {"content": (
        "三体.md:1, 读书/三体.md:3, 《三体》见 读书/三体-刘慈欣.md:2, C++.md:2 and python.md:0.")}])
    assert problems(answer) == {"三体.md:1": "no such note", "读书/三体.md:3": "no such note",
                                "读书/三体-刘慈欣.md:2": "no such note", "C++.md:2": citations.NEVER_SHOWN,
                                "python.md:0": "lines are numbered from 1"}


def test_quote_marks_inside_a_notes_name_are_no_quote(settings, kb):
    (kb / "写作（「渐进写作」）.md").write_text("# 写作\n正文\n", encoding="utf-8")
    answer, _ = answered(settings, [call("list_notes"), {"content": "Notes: 写作（「渐进写作」）.md and python.md."}])
    assert answer.citations.checks == [] and answer.citations.unread == ""
    answer, _ = answered(settings, [call("read_note", file_path="python.md"),
                                    {"content": "“see python.md:3 for nothing like this”"}])  # a quote around a path
    assert problems(answer) == {"python.md:3": citations.NOT_THERE}


def test_every_tool_that_shows_note_text_says_which_lines_and_they_are_the_notes_own(notebook, kb):
    def shown(name, **arguments) -> dict:
        result = tools.execute_tool(name, arguments, notebook)
        return {path: set(lines) for path, lines in result.shown.get("lines", {}).items()}

    long = "# Long\n\n" + "\n".join(f"## Part {n}\n\n{'words ' * 60}" for n in range(1, 80)) + "\n"
    (kb / "long.md").write_text(long, encoding="utf-8")
    seen = shown("read_note", file_path="long.md")["long.md"]  # the outline first, then as many lines as fit
    assert {1, 2, 3, 4, 5, 237} <= seen and 236 not in seen  # what was read, and the outline's heading lines
    seen = shown("read_note", file_path="long.md", start_line=200)["long.md"]
    assert min(seen - {1, 198}) == 200 and {1, 198} <= seen  # and the headings it is under, named in its head
    assert shown("read_note", file_path="long.md", section="Part 2") == {"long.md": {6, 7, 8}}
    (kb / "links.md").write_text("# L\n\nSee [[python]].\n", encoding="utf-8")
    assert shown("links", file_path="links.md") == {"links.md": {3}}
    assert shown("edit_note", file_path="python.md", old_text="Use venv for project!", new_text="x") == {
        "python.md": {4}}  # its closest lines
    grep = "python.md:4:Use venv for projects.\n./work/meeting.md:3:Decided: ship search in December.\n"
    assert citations.shell_shown("grep -rn ship .", grep).lines == {"python.md": {4}, "work/meeting.md": {3}}


def test_a_reworded_tool_result_is_checked_by_what_it_says_it_showed(settings, monkeypatch):
    read = tools.TOOLS["read_note"].function

    def reworded(notebook, **arguments):
        result = read(notebook, **arguments)
        return notes.Shown("Here it is, numbered from the top:\n" + result.split("\n", 1)[1], result.lines,
                           result.named)

    monkeypatch.setitem(tools.TOOLS, "read_note", dataclasses.replace(tools.TOOLS["read_note"], function=reworded))
    answer, history = answered(settings, [call("read_note", file_path="python.md"),
                                          {"content": 'It says "装饰器很有用" (python.md:3), see python.md:99.'}])
    assert "(lines 1-4 of 4)" not in history[2]["content"]
    assert problems(answer) == {"python.md:3": "", "python.md:99": "the note has 4 lines"}


def test_a_saved_conversation_is_checked_again_for_a_page_drawing_it(settings, notebook):
    replies = [call("read_note", file_path="python.md"), {"content": "See python.md:99."},
               {"content": "Hi."}, {"content": "ghost.md:1 has it."}]
    history = []
    reports = [answered(settings, replies[i:i + n], history)[0].citations for i, n in ((0, 2), (2, 1), (3, 1))]
    checked = citations.checked_answers(history, citations.reader(notebook))
    assert checked == {3: reports[0], 7: reports[2]}  # the answer with no citation and no claim has no report
    assert checked[7].failed() == ["ghost.md:1 — no such note"]


def test_the_one_shot_answer_is_stdout_and_each_failed_citation_a_line_on_stderr(call_main, fake_llm, kb):
    fake_llm.replies = [call("read_note", file_path="python.md"),
                        {"content": 'It says "装饰器很有用" (python.md:3), and python.md:99 "x\x1b[2J".'}]
    result = call_main("what does my python note say?", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == 'It says "装饰器很有用" (python.md:3), and python.md:99 "x\\x1b[2J".\n'
    assert "✗ python.md:99 — the note has 4 lines" in result.stderr.splitlines()
    assert "python.md:3 —" not in result.stderr and "\x1b" not in result.stderr


def test_what_was_read_in_an_earlier_run_is_kept_with_the_conversation(call_main, fake_llm, kb):
    assert call_main("find vim notes", kb=kb, base_url=fake_llm.base_url).returncode == 0  # searches, reads vim.md
    fake_llm.replies = [{"content": '"dd" deletes a line (vim.md:3); "gg" (vim.md:99).'}]
    result = call_main("--continue", "and dd?", kb=kb, base_url=fake_llm.base_url)
    assert "✗ vim.md:99 — the note has 4 lines" in result.stderr and "vim.md:3 —" not in result.stderr
    assert citations.READ_BEFORE.strip() in result.stderr


@posix_only
def test_in_the_chat_the_failed_citations_follow_the_answer_before_the_next_prompt(kb, fake_llm, tmp_path):
    env = child_env(DEEPSEEK_API_KEY="x", DEEPSEEK_BASE_URL=fake_llm.base_url, KNOWLEDGE_BASE=str(kb), NO_COLOR="1",
                    XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"), TERM="xterm")
    fake_llm.replies = [{"content": 'Your notes say "use pipenv" (python.md:4).'}]
    chat = Terminal(env)
    chat.expect("\n> ")
    chat.send(b"what do my notes say about venv?\r")
    screen = chat.expect("\n> ", count=2)
    after = screen.split("what do my notes say about venv?", 1)[1]
    assert after.index("(python.md:4).") < after.index("✗ python.md:4 — its text never reached the model")
    assert after.index("⚠ No note was read for this answer") < after.rindex("\n> ")
    chat.send(b"\x04")
    assert chat.close() == 0


def test_the_page_gets_the_report_before_done_and_again_after_a_reload(make_web, fake_llm):
    fake_llm.replies = [call("read_note", file_path="python.md"),
                        {"content": 'It says "装饰器很有用" (python.md:3); see python.md:99.'}]
    page = make_web()
    seen = []
    page.until("done", page.ask("what does my python note say?"), seen)
    kinds = [event["type"] for event in seen]
    assert kinds.index("citations") == len(kinds) - 2  # after the whole answer, before done
    event = seen[-2]
    assert event == {"type": "citations", "unread": "", "checks": [
        {"text": "python.md:3", "path": "python.md", "line": 3, "end": 3, "problem": "", "nth": 0},
        {"text": "python.md:99", "path": "python.md", "line": 99, "end": 99, "problem": "the note has 4 lines",
         "nth": 0}]}
    items = page.get("/api/state")["items"]
    assert [item["type"] for item in items][-2:] == ["text", "citations"] and items[-1] == event


def test_a_private_note_cited_fails_as_never_reached_and_nothing_of_it_is_told(settings, kb):
    (kb / "diary.md").write_text("---\nprivate: true\n---\n# Diary\n\nI told nobody.\n", encoding="utf-8")
    answer, history = answered(settings, [call("read_note", file_path="diary.md"), call("search_notes", query="nobody"),
                                          {"content": 'It says "I told nobody." (diary.md:6), see diary.md:60.'}])
    assert history[2]["content"].startswith("Error: no such note.")  # to the model it is no note
    assert problems(answer) == {"diary.md:6": citations.NEVER_SHOWN, "diary.md:60": citations.NEVER_SHOWN}


def test_a_note_named_without_its_folder_is_the_one_note_of_that_name(settings):
    """Qwen2.5-Coder-1.5B wrote Spaces/0-Work/Notes/读书清单.md, then answered naming "读书清单.md": the check said "no such
    note" and warned that no note was read for an answer that only reports a write."""
    answer, _ = answered(settings, [call("write_note", file_path="reading/读书清单.md", content="# 读书清单\n\n- 三体\n"),
                                    {"content": '已创建 "读书清单.md"，写了三体。'}])
    assert answer.citations.failed() == [] and answer.citations.unread == ""
    answer, _ = answered(settings, [{"content": "根据提供的工具结果，咖啡 22.99 美元。"}])
    assert answer.citations.unread  # "according to the tool results", with no tool called
