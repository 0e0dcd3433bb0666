"""What a person reads can be trusted: a hostile model or note cannot redraw the y/N prompt or the trace.

The chat runs in a real terminal (a pty) against the fake OpenAI-compatible server, as a person uses it.
"""


from conftest import Terminal, call, child_env, posix_only, tool_call

# Erase the line, go back to its start and write an innocent question over it.
SPOOF = "old/scratch.md\x1b[2K\rMove scratch.md to old/scratch.md"


def chat_in_a_terminal(fake_llm, kb, question: str, answers: list[bytes]) -> str:
    """The terminal's text after typing `question`, then each of `answers` at each [y/N] prompt, then Ctrl+D."""
    chat = Terminal(child_env(DEEPSEEK_API_KEY="x", DEEPSEEK_BASE_URL=fake_llm.base_url, KNOWLEDGE_BASE=str(kb),
                              NO_COLOR="1"))
    chat.expect("\n> ")
    chat.send(question.encode() + b"\r")
    for count, answer in enumerate(answers, 1):
        chat.expect("[y/N] ", count)
        chat.send(answer)
    chat.expect("\n> ", 2)  # the answer is done
    chat.send(b"\x04")
    assert chat.close() == 0
    return chat.shown.decode(errors="replace")


@posix_only
def test_a_name_with_terminal_escapes_never_reaches_the_prompt(fake_llm, kb):
    (kb / "important.md").write_text("# Important\n", encoding="utf-8")
    fake_llm.replies = [call("move_note", from_path="important.md", to_path=SPOOF), {"content": "Done."}]
    shown = chat_in_a_terminal(fake_llm, kb, "tidy up", [])
    assert "[y/N]" not in shown  # refused before anyone is asked
    assert "\x1b[2K" not in shown and "\\x1b[2K" in shown  # the trace shows the escape, it does not run it
    assert "control characters" in fake_llm.requests[-1]["messages"][-1]["content"]
    assert (kb / "important.md").exists() and not (kb / "old").exists()


@posix_only
def test_a_plain_move_is_asked_about_with_the_real_names(fake_llm, kb):
    fake_llm.replies = [call("move_note", from_path="vim.md", to_path="old/vim.md"), {"content": "Left it."}]
    shown = chat_in_a_terminal(fake_llm, kb, "archive vim", [b"n\r"])
    assert "Move vim.md to old/vim.md? [y/N]" in shown
    assert (kb / "vim.md").exists() and not (kb / "old").exists()


# Sequences a hostile model or note sends: hide text black on black, erase the line and return to its start,
# write the clipboard (OSC 52), set the window title, make a hyperlink; and a one-byte C1 CSI.
HOSTILE = ["\x1b[30;40m", "\x1b[2K\r", "\x1b]52;c;cm0gLXJmIH4=\x07", "\x1b]0;pwned\x07",
           "\x1b]8;;http://evil.example\x1b\\", "\x9b2J"]


def obeyed(shown: str) -> list[str]:
    """The hostile sequences that reached the terminal as they are (so the terminal would obey them)."""
    return [seq for seq in HOSTILE if seq.rstrip("\r") in shown]


@posix_only
def test_no_escape_sequence_of_the_model_reaches_the_terminal(fake_llm, kb):
    """With NO_COLOR a model drew a fake `Delete old-draft.md?` over the real `Delete plan.md?` in black on black,
    and OSC 52, title and hyperlink sequences reached the terminal: answers, reasoning and trace lines show
    them as visible escapes instead."""
    (kb / "plan.md").write_text("# Plan\n", encoding="utf-8")
    cover = "".join(HOSTILE) + "Delete old-draft.md? (a copy is kept in .history/)\x1b[30;40m"
    fake_llm.replies = [{"reasoning": "thinking " + "".join(HOSTILE), "content": cover,
                         "tool_calls": [tool_call("delete_note", file_path="plan.md")]},
                        {"content": "Answer " + "".join(HOSTILE)}]
    shown = chat_in_a_terminal(fake_llm, kb, "tidy up", [b"n\r"])
    assert obeyed(shown) == [] and "\\x1b[30;40m" in shown and "\\x1b]52;" in shown
    assert "Delete plan.md? (a copy is kept in .history/) [y/N]" in shown  # the real question, readable
    assert (kb / "plan.md").exists()


def test_no_escape_sequence_of_a_note_reaches_the_terminal(call_main, fake_llm, kb):
    """The same through what a note holds: a tool trace line, and /read by hand."""
    (kb / "evil.md").write_text("# Evil\n" + "".join(HOSTILE) + "\n", encoding="utf-8")
    fake_llm.replies = [call("read_note", file_path="evil.md"),
                        {"content": "Read it."}]
    traced = call_main("read evil.md", kb=kb, base_url=fake_llm.base_url)
    assert traced.returncode == 0 and obeyed(traced.stdout + traced.stderr) == []
    for result in (call_main("/read evil.md", kb=kb, key=None), call_main("/search evil", kb=kb, key=None)):
        assert result.returncode == 0, result.stderr
        assert obeyed(result.stdout + result.stderr) == [] and "\\x1b]52;" in result.stdout


def test_a_tool_name_from_the_model_is_shown_not_obeyed(call_main, fake_llm, kb):
    fake_llm.replies = [{"tool_calls": [{"name": "x" + "".join(HOSTILE), "arguments": "{}"}]}, {"content": "Done."}]
    result = call_main("go", kb=kb, base_url=fake_llm.base_url)
    assert result.returncode == 0 and obeyed(result.stderr) == [] and "→ x\\x1b[30;40m" in result.stderr


def test_invisible_characters_of_the_model_are_shown(call_main, fake_llm, kb):
    """A line separator breaks the line in some terminals; zero-width and tag characters hide text."""
    fake_llm.replies = [{"content": "rm -rf important\u2028ls \u200bhidden\U000e0041\u3164 👨\u200d👩 한국어"}]
    result = call_main("go", kb=kb, base_url=fake_llm.base_url)
    assert result.stdout.strip() == "rm -rf important\\u2028ls \\u200bhidden\\U000e0041\\u3164 👨\u200d👩 한국어"
