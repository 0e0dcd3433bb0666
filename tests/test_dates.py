"""Dates: each note's day (its daily-note name, its date, created or date created property, else when it was
modified), shown in hits and listings; search_notes' and list_notes' after and before; a tool's arguments checked
by name.

Real files in tmp_path, the real tools through tools.execute_tool (conftest.run_tool), /list through main.main.
"""

import json
import os
import shutil
import sys
from datetime import datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import model  # noqa: E402
import search  # noqa: E402
from conftest import ROOT, hits, make_notebook, run_tool, write  # noqa: E402
from fake_embedder import FakeEmbedder  # noqa: E402


def modified_on(path: Path, day: str) -> None:
    """Set the note's modification time to noon of that day, local time (as a note's day is read)."""
    stamp = datetime.fromisoformat(f"{day}T12:00").timestamp()
    os.utime(path, (stamp, stamp))


@pytest.fixture
def dated(tmp_path) -> Path:
    """A vault whose daily notes are journal/DD.MM.YYYY.md, with a note dated each way, one a day apart."""
    kb = tmp_path / "vault"
    write(kb, ".obsidian/daily-notes.json", json.dumps({"folder": "journal", "format": "DD.MM.YYYY"}))
    write(kb, "journal/01.11.2026.md", "# Sunday\n\nQuiet day.\n")
    write(kb, "plans.md", "---\ndate: 2026-11-02\n---\n# Plans\n\nDecided to move the meetup to Friday.\n")
    write(kb, "talk.md", "---\ncreated: 2026-11-03 10:00\n---\nTalk draft: the meetup agenda.\n")
    write(kb, "draft.md", "---\ndate created: 2026-10-29 09:30\n---\nAn outline, dated by Obsidian Linter's key.\n")
    modified_on(write(kb, "old.md", "# Old\n\nThe meetup venue, from long ago.\n"), "2026-11-04")
    modified_on(write(kb, "bad.md", "---\ndate: 2026-02-31\n---\nA meetup with a bad date.\n"), "2026-10-30")
    for note in ("journal/01.11.2026.md", "plans.md", "talk.md", "draft.md"):
        modified_on(kb / note, "2026-12-01")  # what names and properties say wins over this
    return kb.resolve()


@pytest.fixture
def notebook(dated, tmp_path):
    with make_notebook(dated, index_dir=tmp_path / "index") as notebook:
        yield notebook


def test_each_note_shows_its_day_and_where_it_comes_from(notebook):
    listed = run_tool(notebook, "list_notes")
    assert listed.splitlines()[1:7] == [
        "old.md — Old  (2026-11-04, modified)",
        "talk.md — talk  (2026-11-03, created property)",
        "plans.md — Plans  (2026-11-02, date property)",
        "journal/01.11.2026.md — Sunday  (2026-11-01, from its name)",
        "bad.md — bad  (2026-10-30, modified)",  # 2026-02-31 is no day: ignored
        "draft.md — draft  (2026-10-29, date created property)"]
    found = run_tool(notebook, "search_notes", query="meetup")
    assert "plans.md — Plans (2026-11-02, date property)\n" in found
    assert "old.md — Old (2026-11-04, modified)\n" in found


def test_a_range_keeps_exactly_the_notes_of_its_days_both_ends_included(notebook):
    found = run_tool(notebook, "search_notes", query="meetup", after="2026-11-02", before="2026-11-03")
    assert found.startswith('2 notes dated 2026-11-02 to 2026-11-03 match "meetup"')
    assert sorted(hits(found)) == ["plans.md", "talk.md"]
    assert hits(run_tool(notebook, "list_notes", after="2026-11-04")) == ["old.md"]
    assert hits(run_tool(notebook, "list_notes", before="2026-11-01")) == [
        "journal/01.11.2026.md", "bad.md", "draft.md"]
    assert hits(run_tool(notebook, "search_notes", query="meetup", before=None)) != []  # null: no bound


def test_an_empty_query_with_a_range_lists_those_days_newest_first_with_their_opening_lines(notebook):
    found = run_tool(notebook, "search_notes", query="", after="2026-11-01", before="2026-11-03")
    assert found.startswith("3 notes dated 2026-11-01 to 2026-11-03, newest first:")
    assert hits(found) == ["talk.md", "plans.md", "journal/01.11.2026.md"]
    assert "plans.md — Plans (2026-11-02, date property)\n  6: Decided to move the meetup to Friday." in found
    assert "date:" not in found and "---" not in found  # the body's lines, not the front matter
    assert hits(run_tool(notebook, "search_notes", after="2026-11-04")) == ["old.md"]  # no query at all


def test_words_no_note_of_those_days_has_list_the_days_notes_instead(notebook):
    found = run_tool(notebook, "search_notes", query="what did I decide", after="2026-11-02", before="2026-11-02")
    assert found.startswith('No note dated 2026-11-02 to 2026-11-02 has the words of "what did I decide". 1 note')
    assert hits(found) == ["plans.md"]


def test_days_or_a_folder_with_no_note_that_has_the_words_search_all_the_notes_and_say_so(notebook):
    # Qwen2.5-Coder-1.5B gave a question with no time in it the days around today, and a folder beside the note
    found = run_tool(notebook, "search_notes", query="venue", after="2022-05-03", before="2022-05-03")
    assert found.startswith('No note dated 2022-05-03 to 2022-05-03 has the words of "venue"; in all the notes: 1 ')
    assert hits(found) == ["old.md"]
    assert hits(run_tool(notebook, "search_notes", query="venue", folder="journal")) == ["old.md"]
    assert run_tool(notebook, "search_notes", query="zebra", folder="journal").startswith('No notes in journal/ match')



def test_days_where_no_note_has_every_word_show_the_notes_that_do_first_then_the_days_own(notebook):
    # Qwen2.5-Coder-1.5B copied two passages' dates as after and before; the note it needed was outside them
    found = run_tool(notebook, "search_notes", query="meetup venue", after="2026-11-02", before="2026-11-03")
    assert found.startswith('Beyond the notes dated 2026-11-02 to 2026-11-03, which follow: 2 notes match "meetup '
                            'venue" (1 with every word), best first:\n\nold.md — Old (2026-11-04, modified)')
    others, period = found.split('\n\nNo note dated 2026-11-02 to 2026-11-03 has every word of "meetup venue"; 2 '
                                 'notes have some of them, best first:')
    assert hits(others) == ["old.md", "bad.md"] and "more matched" not in others
    assert sorted(hits(period)) == ["plans.md", "talk.md"] and not set(hits(others)) & set(hits(period))
    alone = run_tool(notebook, "search_notes", query="Friday quiet", after="2026-11-01", before="2026-11-02")
    assert alone.startswith('No note dated 2026-11-01 to 2026-11-02 has every word')  # no better note elsewhere
    asked = run_tool(notebook, "search_notes", query="meetup agenda", after="2026-11-02", before="2026-11-03")
    assert asked.startswith('2 notes dated 2026-11-02 to 2026-11-03 match') and "old.md" not in asked


def test_the_notes_of_all_and_of_the_days_together_stay_within_one_results_bound(tmp_path):
    kb = tmp_path / "vault"
    for day in range(1, 29):
        line = f"meetup notes of day {day}, " + "a long line of words " * 8
        write(kb, f"2026-11-{day:02}.md", "".join(f"{line}{n}\n" for n in range(12)))
        write(kb, f"venues/{day}.md", "---\ndate: 2025-01-01\n---\n" + f"meetup venue {day}, {line}\n" * 12)
    found = run_tool(make_notebook(kb), "search_notes", query="meetup venue", after="2026-11-01",
                     before="2026-11-30")
    assert found.startswith("Beyond the notes dated 2026-11-01 to 2026-11-30, which follow: 28 notes match"), found
    assert len(found) <= search.SEARCH_OUTPUT_CHARS and "\n\nNo note dated 2026-11-01 to 2026-11-30 has" in found

@pytest.mark.parametrize("args, message", [
    ({"after": "11/01/2026"}, "Error: after must be a date written YYYY-MM-DD, like 2026-11-01; '11/01/2026' is not one."),
    ({"before": "2026-02-30"}, "Error: before must be a date written YYYY-MM-DD, like 2026-11-01; '2026-02-30' is not one."),
    ({"after": "2026-11-05", "before": "2026-11-01"},
     "Error: after (2026-11-05) is later than before (2026-11-01): no day is in that range."),
    ({"path": "plans.md"}, "Error: search_notes has no argument 'path'; its arguments are query, folder, after, "
                           "before."),
])
def test_a_bad_date_or_an_unknown_argument_says_what_is_wanted(notebook, args, message):
    assert run_tool(notebook, "search_notes", query="meetup", **args).startswith(message)


def test_list_notes_names_its_arguments_too(notebook):
    assert run_tool(notebook, "list_notes", type="object") == (
        "Error: list_notes has no argument 'type'; its arguments are folder, after, before.")


def test_changing_the_daily_note_format_dates_the_notes_again(dated, tmp_path):
    for watch in (True, False):
        with make_notebook(dated, index_dir=tmp_path / f"index-{watch}", search_watch=watch) as notebook:
            assert "journal/01.11.2026.md — Sunday  (2026-11-01, from its name)" in run_tool(notebook, "list_notes")
            write(dated, ".obsidian/daily-notes.json", json.dumps({"format": "MM.DD.YYYY"}))
            assert "journal/01.11.2026.md — Sunday  (2026-01-11, from its name)" in run_tool(notebook, "list_notes")
            write(dated, ".obsidian/daily-notes.json", json.dumps({"format": "YYYY-MM-DD"}))
            assert "journal/01.11.2026.md — Sunday  (2026-12-01, modified)" in run_tool(notebook, "list_notes")
            write(dated, ".obsidian/daily-notes.json", json.dumps({"folder": "journal", "format": "DD.MM.YYYY"}))


def test_the_sample_notes_answer_what_was_decided_in_november(tmp_path):
    kb = tmp_path / "notes"
    shutil.copytree(ROOT / "knowledge_base", kb)
    for note in kb.rglob("*.md"):
        modified_on(note, "2026-12-01")  # a checkout's day, which must not put the other notes in November
    with make_notebook(kb.resolve(), index_dir=tmp_path / "index") as notebook:
        for query in ("what did I decide in November", ""):
            found = run_tool(notebook, "search_notes", query=query, after="2026-11-01", before="2026-11-30")
            assert hits(found) == ["work/meeting-2026-11-02.md"], found
            assert "— Team sync — 2026-11-02 (2026-11-02, from its name)" in found
            assert "Ship the search index behind a flag in the December release." in found


def test_notes_close_in_meaning_are_kept_to_the_range_too(tmp_path):
    kb = tmp_path / "notes"
    modified_on(write(kb, "images.md", "# Resize an image\n\nUse convert to scale a picture down.\n"), "2026-10-05")
    write(kb, "2026-11-02 photos.md", "# Pictures\n\nMake every picture smaller before the upload.\n")
    with FakeEmbedder() as fake, make_notebook(kb.resolve(), index_dir=tmp_path / "index", embed_model="fake",
                                               embed_base_url=fake.base_url) as notebook:
        assert "images.md" in hits(run_tool(notebook, "search_notes", query="shrink photo"))
        assert hits(run_tool(notebook, "search_notes", query="shrink photo", after="2026-11-01")) == [
            "2026-11-02 photos.md"]


def test_the_system_prompt_names_the_weekday_and_turns_times_into_ranges():
    prompt = model.system_message()["content"]
    today = datetime.now()
    assert f"Today is {today:%Y-%m-%d}, {today:%A}." in prompt
    assert '"in November"' in prompt and "after and before" in prompt


def test_list_and_search_commands_take_the_range(call_main, dated):
    listed = call_main("/list --after 2026-11-03", kb=dated)
    assert listed.returncode == 0 and hits(listed.stdout) == ["old.md", "talk.md"]
    found = call_main("/search meetup --before=2026-11-02", kb=dated)
    assert sorted(hits(found.stdout)) == ["bad.md", "plans.md"]
    wrong = call_main("/list --after 2026-13-01", kb=dated)
    assert wrong.returncode != 0 and "after must be a date written YYYY-MM-DD" in wrong.stderr
