"""Tests for search.py: ranking, Chinese words, hostile queries, freshness, damage, bounded output.

Real files in tmp_path; the index goes to tmp_path too (KA_INDEX_DIR). Freshness tests run twice: with
Linux inotify and with it turned off (every search then compares sizes and mtimes).
"""

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_settings

import config
import search
from tools import execute_tool


@pytest.fixture(autouse=True)
def index_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(config.INDEX_DIR_ENV, str(tmp_path / "index"))
    monkeypatch.delenv(config.SEARCH_WATCH_ENV, raising=False)
    search.close_indexes()
    yield tmp_path / "index"
    search.close_indexes()


@pytest.fixture(params=["inotify", "stat"])
def watch_mode(request, monkeypatch):
    if request.param == "stat":
        monkeypatch.setenv(config.SEARCH_WATCH_ENV, "0")
    return request.param


def write(kb: Path, rel: str, text: str) -> Path:
    path = kb / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def hits(output: str) -> list:
    """Paths of the hits, best first, as the model reads them."""
    return re.findall(r"^(\S.*?) — ", output, re.M)


@pytest.fixture
def kb(tmp_path):
    root = tmp_path / "notes"
    write(root, "cooking/bread.md", "# Sourdough bread\n\nA starter, flour and water.\n\nBake at 230 degrees.\n")
    write(root, "cooking/pasta.md", "# Pasta\n\nBoil water with salt.\nBread crumbs on top are nice.\n")
    write(root, "travel/japan.md", "# Trip to Japan\n\nKyoto temples; bread is rare at breakfast.\n")
    write(root, "python.md", "# Python\n\nNotes on the language.\n")
    write(root, "snakes.md", "# Reptiles\n\nThe python is a large snake. Python, python, python.\n")
    write(root, "zh/读书.md", "# 读书笔记\n\n今天学习了机器学习的基本概念，以及深度学习的应用。\n")
    write(root, "zh/编辑器.md", "# 编辑器\n\n我用 Vim 编辑文本，也用 VSCode。\n")
    return root


# ----------------------------------------------------------------------------------------------------
# Ranking


def test_exact_title_comes_first_even_against_a_denser_note(kb):
    out = search.search_notes(kb, "python")
    assert hits(out)[:2] == ["python.md", "snakes.md"]


def test_title_match_ranks_above_body_mentions(kb):
    assert hits(search.search_notes(kb, "bread"))[0] == "cooking/bread.md"


def test_notes_with_every_word_come_before_notes_with_some(kb):
    out = search.search_notes(kb, "bread water")
    ranked = hits(out)
    # bread.md and pasta.md hold both words; japan.md only "bread", so it comes after them.
    assert set(ranked[:2]) == {"cooking/bread.md", "cooking/pasta.md"}
    assert ranked[2] == "travel/japan.md"
    assert "2 with every word" in out


def test_word_order_and_case_do_not_matter(kb):
    assert hits(search.search_notes(kb, "WATER flour"))[0] == "cooking/bread.md"


def test_quoted_phrase_must_appear_in_that_order(kb):
    assert hits(search.search_notes(kb, '"bread crumbs"')) == ["cooking/pasta.md"]
    assert "No notes" in search.search_notes(kb, '"crumbs bread"')


def test_hits_show_title_and_matching_lines_with_numbers(kb):
    out = search.search_notes(kb, "temples")
    assert "travel/japan.md — Trip to Japan\n  3: Kyoto temples; bread is rare at breakfast." in out


def test_note_found_by_its_path_alone_shows_its_opening_line(kb):
    write(kb, "recipes/soup.md", "# Soup\n\nLeeks and potatoes.\n")
    assert "recipes/soup.md — Soup\n  3: Leeks and potatoes." in search.search_notes(kb, "recipes")


def test_no_match_says_so_without_error(kb):
    out = search.search_notes(kb, "zeppelin")
    assert out.startswith("No notes") and "zeppelin" in out


def test_folder_filter_keeps_only_that_folder(kb):
    assert hits(search.search_notes(kb, "bread", folder="travel")) == ["travel/japan.md"]


@pytest.mark.parametrize("folder", ["../", "/etc", "nope"])
def test_bad_folder_is_an_error_the_model_can_act_on(kb, folder):
    assert search.search_notes(kb, "bread", folder=folder).startswith("Error: ")


# ----------------------------------------------------------------------------------------------------
# Chinese and mixed queries


@pytest.mark.parametrize("word, note", [("学习", "zh/读书.md"), ("概念", "zh/读书.md"),
                                        ("编辑", "zh/编辑器.md"), ("读书", "zh/读书.md")])
def test_two_character_chinese_words_inside_sentences_are_found(kb, word, note):
    assert hits(search.search_notes(kb, word))[0] == note


def test_longer_chinese_term_ranks_whole_matches_before_scattered_pairs(kb):
    write(kb, "zh/scattered.md", "# 机器 学习\n\n机器很好。学习也好。\n")  # a title weighs more, yet comes after
    assert hits(search.search_notes(kb, "机器学习")) == ["zh/读书.md", "zh/scattered.md"]


def test_single_chinese_character_is_found_anywhere_in_a_run(kb):
    assert set(hits(search.search_notes(kb, "器"))) == {"zh/读书.md", "zh/编辑器.md"}


def test_mixed_chinese_and_english_query(kb):
    assert hits(search.search_notes(kb, "Vim 编辑"))[0] == "zh/编辑器.md"
    assert hits(search.search_notes(kb, "用Vim"))[0] == "zh/编辑器.md"


@pytest.fixture
def zh_kb(tmp_path):
    """Notes that hold the words of the tester's queries, but never the queries as written."""
    root = tmp_path / "zh-notes"
    write(root, "gzip.md", "# gzip\n\n> 压缩文件或者解压文件。\n")
    write(root, "ip.md", "# ip\n\n> 显示和修改网络配置。\n")
    write(root, "chmod.md", "# chmod\n\n> 修改文件或目录的访问权限。\n")
    write(root, "unzip.md", "# unzip\n\n> 从 ZIP 压缩包中解压出文件。\n")
    write(root, "admin.md", "# 系统管理\n\n> 网络配置与权限管理。\n")
    write(root, "misc.md", "# 杂项\n\n> 这里的文件很多。\n")
    write(root, "en.md", "# Archives\n\nCompress files with tar.\n")
    return root


@pytest.mark.parametrize("query, best", [("如何压缩文件", "gzip.md"), ("查看网络配置", "ip.md"),
                                         ("怎么修改文件的权限", "chmod.md"), ("解压zip文件", "unzip.md"),
                                         ("压缩文件权限管理系统网络配置", "admin.md")])
def test_chinese_written_without_spaces_finds_notes_with_its_words(zh_kb, query, best):
    out = search.search_notes(zh_kb, query)
    assert hits(out)[0] == best, out
    assert "en.md" not in hits(out)


def test_chinese_run_ranks_phrase_then_every_word_then_any_word(zh_kb):
    write(zh_kb, "phrase.md", "如何压缩文件？看这里。\n")
    write(zh_kb, "apart.md", "压缩文件。如何压？\n")  # every 2-character word of the query, not in a row
    write(zh_kb, "one.md", "# 压缩\n\n压缩，压缩，压缩。\n")  # only one word, but in the title and often
    out = search.search_notes(zh_kb, "如何压缩文件")
    ranked = hits(out)
    assert ranked[:2] == ["phrase.md", "apart.md"], out
    assert ranked.index("gzip.md") < ranked.index("one.md")  # more of the query's words beat one word
    assert "(2 with every word)" in out
    assert "1: 如何压缩文件？看这里。" in out


def test_mixed_chinese_and_latin_run_is_split_where_the_script_changes(zh_kb):
    write(zh_kb, "howto.md", "# 笔记\n\n解压ZIP文件的方法。\n")
    out = search.search_notes(zh_kb, "解压zip文件")
    assert hits(out)[:2] == ["howto.md", "unzip.md"], out
    assert "3: 解压ZIP文件的方法。" in out and "3: > 从 ZIP 压缩包中解压出文件。" in out


def test_matching_chinese_line_is_shown(kb):
    assert "3: 今天学习了机器学习的基本概念" in search.search_notes(kb, "深度学习")


# ----------------------------------------------------------------------------------------------------
# Queries that would break a naive FTS5 query


@pytest.mark.parametrize("query", ['"', 'bread"', '"bread', "bread*", "*", "-bread", "bread -water",
                                   "bread AND", "AND", "(bread", "bread)", "bread OR (water",
                                   "NEAR(bread water)", "bread:", "title:bread", "^bread", "bread + water",
                                   "{bread}", "'bread'", "c++", "a.b", "\\", "100%"])
def test_fts5_operator_characters_never_reach_the_user_as_errors(kb, query):
    out = search.search_notes(kb, query)
    assert "syntax" not in out.lower() and "fts5" not in out.lower()
    if re.search(r"bread", query):
        assert "cooking/bread.md" in hits(out)


@pytest.mark.parametrize("word", ["NOT", "AND", "OR", "NEAR"])
def test_upper_case_operators_are_searched_as_words(kb, word):
    write(kb, "ops.md", "# Operators\n\nDo not panic, near or far, and smile.\n")
    assert "ops.md" in hits(search.search_notes(kb, word))
    assert hits(search.search_notes(kb, f"panic {word}"))[0] == "ops.md"


def test_query_with_no_words_is_a_clear_error(kb):
    assert search.search_notes(kb, " ( * - ").startswith("Error: ")
    assert search.search_notes(kb, "").startswith("Error: ")


# ----------------------------------------------------------------------------------------------------
# Freshness: outside edits, renames, deletions; the agent's own writes


def test_outside_edit_is_found_by_the_next_search(kb, watch_mode):
    search.search_notes(kb, "bread")
    write(kb, "travel/japan.md", "# Trip to Japan\n\nOnsen and ramen.\n")
    assert hits(search.search_notes(kb, "ramen")) == ["travel/japan.md"]
    assert "travel/japan.md" not in hits(search.search_notes(kb, "bread"))


def test_new_note_in_a_new_folder_is_found(kb, watch_mode):
    search.search_notes(kb, "bread")
    write(kb, "new/deep/er/idea.md", "# Idea\n\nA zeppelin garden.\n")
    assert hits(search.search_notes(kb, "zeppelin")) == ["new/deep/er/idea.md"]


def test_renamed_and_deleted_notes_leave_the_results(kb, watch_mode):
    search.search_notes(kb, "bread")
    (kb / "cooking/bread.md").rename(kb / "cooking/levain.md")
    (kb / "cooking/pasta.md").unlink()
    out = search.search_notes(kb, "bread")
    assert "cooking/levain.md" in hits(out)
    assert not {"cooking/bread.md", "cooking/pasta.md"} & set(hits(out))


def test_renamed_and_deleted_folders_are_followed(kb, watch_mode):
    search.search_notes(kb, "bread")
    (kb / "cooking").rename(kb / "kitchen")
    assert set(hits(search.search_notes(kb, "water"))) == {"kitchen/bread.md", "kitchen/pasta.md"}
    write(kb, "kitchen/soup.md", "Water and leeks.\n")  # the moved folder is still watched
    assert "kitchen/soup.md" in hits(search.search_notes(kb, "leeks"))
    for note in (kb / "kitchen").iterdir():
        note.unlink()
    (kb / "kitchen").rmdir()
    assert "No notes" in search.search_notes(kb, "water")


def test_agent_write_is_indexed_even_when_size_and_mtime_look_unchanged(kb, monkeypatch):
    monkeypatch.setenv(config.SEARCH_WATCH_ENV, "0")  # no inotify: only size+mtime would notice
    search.search_notes(kb, "bread")
    path = kb / "python.md"
    before = path.stat()
    path.write_text("# Python\n\nNotes on the zebra.\n", encoding="utf-8")  # same length as before
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    search.note_changed(kb, "python.md")
    assert hits(search.search_notes(kb, "zebra")) == ["python.md"]


def test_agent_changes_through_the_tools_show_in_the_next_search(kb, watch_mode):
    settings = make_settings(kb, auto_approve=True)

    def tool(name, **args):
        result = execute_tool(name, args, settings, confirm=lambda question: True)
        assert not result.startswith("Error"), result
        return result

    assert "cooking/bread.md" in hits(tool("search_notes", query="flour"))
    tool("write_note", file_path="garden/tomatoes.md", content="# Tomatoes\n\nStake them.\n")
    assert hits(tool("search_notes", query="stake")) == ["garden/tomatoes.md"]
    tool("edit_note", file_path="garden/tomatoes.md", old_text="Stake", new_text="Prune")
    assert hits(tool("search_notes", query="prune")) == ["garden/tomatoes.md"]
    tool("move_note", from_path="garden/tomatoes.md", to_path="veg/tomatoes.md")
    assert hits(tool("search_notes", query="prune", folder="veg")) == ["veg/tomatoes.md"]
    tool("delete_note", file_path="veg/tomatoes.md")
    assert "No notes" in tool("search_notes", query="prune")
    for folder in ("../outside", ".history"):
        assert execute_tool("search_notes", {"query": "flour", "folder": folder}, settings).startswith("Error:")


def test_note_changed_never_raises_nor_reaches_outside(kb, tmp_path):
    search.note_changed(kb, "no/such/note.md")
    search.search_notes(kb, "bread")
    write(tmp_path, "outside/leak.md", "quasar")
    for rel in ("no/such/note.md", "../outside.md", "../outside", str(tmp_path / "outside"), ""):
        search.note_changed(kb, rel)
    search.note_changed(kb / "missing", "x.md")
    assert "No notes" in search.search_notes(kb, "quasar")


def test_index_lives_outside_the_notes_and_is_reused(kb, index_dir):
    before = sorted(p.relative_to(kb) for p in kb.rglob("*"))
    search.search_notes(kb, "bread")
    assert sorted(p.relative_to(kb) for p in kb.rglob("*")) == before
    assert list(index_dir.glob("*.sqlite"))
    search.close_indexes()
    assert "cooking/bread.md" in hits(search.search_notes(kb, "bread"))


def test_index_folder_defaults_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(config.INDEX_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert search.index_path(tmp_path / "kb").parent == tmp_path / "cache" / "knowledge-agent"
    assert search.index_path(tmp_path / "kb") != search.index_path(tmp_path / "other" / "kb")


# ----------------------------------------------------------------------------------------------------
# Damage and sharing


def test_corrupt_index_is_rebuilt_with_a_one_line_notice(kb, capsys):
    search.search_notes(kb, "bread")
    search.close_indexes()
    path = search.index_path(kb)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.write_bytes(b"this is not a database" * 1000)
    out = search.search_notes(kb, "bread")
    assert hits(out)[0] == "cooking/bread.md"
    notice = capsys.readouterr().err.strip().splitlines()
    assert len(notice) == 1 and "rebuilding" in notice[0]


def test_index_damaged_while_open_is_rebuilt(kb, capsys):
    search.search_notes(kb, "bread")
    idx = next(iter(search._OPEN.values()))
    idx.conn.execute("DROP TABLE notes")  # what a damaged file looks like to the next query
    assert hits(search.search_notes(kb, "bread"))[0] == "cooking/bread.md"
    assert "rebuilding" in capsys.readouterr().err


def test_unwritable_index_folder_falls_back_to_memory(kb, monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    monkeypatch.setenv(config.INDEX_DIR_ENV, str(blocker / "index"))
    assert hits(search.search_notes(kb, "bread"))[0] == "cooking/bread.md"
    assert "in memory" in capsys.readouterr().err


def test_another_process_can_use_the_same_index(kb, index_dir, watch_mode):
    search.search_notes(kb, "bread")  # this process keeps the index open
    code = ("import sys, search; from pathlib import Path; "
            "print(search.search_notes(Path(sys.argv[1]), 'flour'))")
    env = dict(os.environ, **{config.INDEX_DIR_ENV: str(index_dir)})
    other = subprocess.run([sys.executable, "-c", code, str(kb)], capture_output=True, text=True,
                           env=env, cwd=Path(search.__file__).parent, timeout=60)
    assert "cooking/bread.md" in other.stdout, other.stderr
    write(kb, "late.md", "Flour again.\n")
    (kb / "cooking/bread.md").unlink()
    subprocess.run([sys.executable, "-c", code, str(kb)], env=env, cwd=Path(search.__file__).parent,
                   capture_output=True, timeout=60)  # the other process indexes both changes first
    assert hits(search.search_notes(kb, "flour")) == ["late.md"]
    assert sqlite3.connect(search.index_path(kb)).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_opening_an_index_another_process_has_just_created_is_no_error(kb, monkeypatch, capsys):
    search.search_notes(kb, "bread")
    search.close_indexes()
    monkeypatch.setattr(search, "_has_meta", lambda conn: False)  # created by another right after our look
    assert hits(search.search_notes(kb, "bread"))[0] == "cooking/bread.md"
    assert capsys.readouterr().err == ""


def test_index_locked_too_long_by_another_process_answers_from_what_it_holds(kb, watch_mode, monkeypatch,
                                                                               capsys):
    search.search_notes(kb, "bread")
    search.close_indexes()
    monkeypatch.setattr(search, "INDEX_BUSY_TIMEOUT_MS", 10)
    monkeypatch.setattr(search, "INDEX_WAIT_S", 0)
    search.search_notes(kb, "bread")
    write(kb, "late.md", "Bread, written while another process builds the index.\n")
    other = sqlite3.connect(search.index_path(kb), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # what a long first build in another process looks like
    try:
        out = search.search_notes(kb, "bread")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "cooking/bread.md" in hits(out) and "late.md" not in hits(out)
    assert "still indexing" in out and not out.startswith("Error")
    assert "still being updated" in capsys.readouterr().err
    assert "late.md" in hits(search.search_notes(kb, "bread"))  # the next search catches up


def test_slow_first_build_reports_progress_on_stderr(kb, monkeypatch, capsys):
    monkeypatch.setattr(search, "INDEX_PROGRESS_AFTER_S", 0)
    monkeypatch.setattr(search, "_BATCH", 2)
    search.search_notes(kb, "bread")
    err = capsys.readouterr().err
    assert "indexing" in err and "indexed 7 notes" in err


# ----------------------------------------------------------------------------------------------------
# Which files count, and bounded output


def test_odd_names_are_notes_and_hidden_or_foreign_files_are_skipped(kb):
    for name in ("..md", "!.md", "((.md", "[.md"):
        write(kb, f"odd/{name}", "Quasar notes.\n")
    write(kb, ".obsidian/cache.md", "quasar")
    write(kb, f"{config.HISTORY_DIR}/old.md", "quasar")
    write(kb, "cooking/.hidden/x.md", "quasar")
    write(kb, "image.png", "quasar")
    write(kb, "notes.md.bak", "quasar")
    (kb / "broken.md").write_bytes(b"quasar \xff\xfe broken bytes")
    out = search.search_notes(kb, "quasar")
    assert sorted(hits(out)) == sorted(["odd/..md", "odd/!.md", "odd/((.md", "odd/[.md", "broken.md"])


def test_links_out_fifos_and_loops_added_later_are_never_indexed(kb, tmp_path, watch_mode):
    search.search_notes(kb, "bread")
    (tmp_path / "secret.md").write_text("quasar password", encoding="utf-8")
    os.symlink(tmp_path / "secret.md", kb / "out.md")
    os.symlink(kb / "python.md", kb / "inside.md")
    os.symlink(kb / "loop.md", kb / "loop.md")
    os.mkfifo(kb / "pipe.md")
    search.note_changed(kb, "pipe.md")  # must not block on the FIFO
    assert "No notes" in search.search_notes(kb, "quasar")
    assert set(hits(search.search_notes(kb, "language"))) == {"python.md", "inside.md"}


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads everything")
def test_unreadable_note_is_skipped_quietly(kb, capsys):
    secret = write(kb, "secret.md", "quasar")
    secret.chmod(0)
    try:
        out = search.search_notes(kb, "quasar")
    finally:
        secret.chmod(0o644)
    assert out.startswith("No notes") and capsys.readouterr().err == ""


@pytest.mark.parametrize("rel, expected", [("a.md", True), ("dir/b.TXT", True), ("..md", True),
                                           ("!.md", True), ("((.md", True), (".md", False),
                                           (".git/x.md", False), (".history/a/b.md", False),
                                           ("a.pdf", False), ("../up.md", False)])
def test_is_note_file(rel, expected):
    assert search.is_note_file(rel) is expected


def test_huge_match_set_is_bounded_and_counts_the_rest(tmp_path):
    kb = tmp_path / "big"
    for i in range(600):
        write(kb, f"n{i:03}.md", f"# Note {i}\n\n" + ("common word here. " * 50 + "\n") * 20)
    out = search.search_notes(kb, "common word")
    assert len(out) <= config.SEARCH_OUTPUT_CHARS
    assert len(hits(out)) <= config.SEARCH_MAX_HITS
    shown = len(hits(out))
    assert f"({600 - shown} more matched" in out
    assert all(len(line) <= config.SEARCH_LINE_CHARS + 12 for line in out.splitlines())


def test_huge_query_is_echoed_short_and_the_answer_stays_bounded(kb):
    query = " ".join(["bread"] + [f"word{i}" for i in range(20000)])[:100_000]
    for text in (query, "面包" * 50_000):
        out = search.search_notes(kb, text)
        assert len(out) <= config.SEARCH_OUTPUT_CHARS, len(out)
        assert len(out.splitlines()[0]) < config.SEARCH_QUERY_ECHO_CHARS + 120
    assert "cooking/bread.md" in hits(search.search_notes(kb, query))


def test_lone_surrogate_in_a_json_query_is_replaced_and_the_rest_searched(kb):
    write(kb, "archive.md", "# Archive\n\nUse tar for this.\n")
    settings = make_settings(kb)
    out = execute_tool("search_notes", '{"query": "\\ud800tar"}', settings)
    assert hits(out) == ["archive.md"], out
    assert execute_tool("search_notes", '{"query": "tar", "folder": "\\udc80x"}', settings).startswith(
        "Error: there is no folder")
    assert search.list_notes(kb, "\ud800").startswith("Error: there is no folder")


# ----------------------------------------------------------------------------------------------------
# Listing


def test_list_notes_counts_folders_and_shows_newest_first(kb):
    os.utime(kb / "travel/japan.md", (2_000_000_000, 2_000_000_000))
    out = search.list_notes(kb)
    assert out.startswith("7 note(s) in the knowledge base, newest first:")
    assert "cooking/ (2)" in out and "zh/ (2)" in out
    listed = hits(out)
    assert listed[0] == "travel/japan.md" and len(listed) == 7


def test_list_notes_in_a_folder_and_capped(tmp_path, monkeypatch):
    kb = tmp_path / "many"
    for i in range(30):
        write(kb, f"box/n{i:02}.md", "x")
    write(kb, "other.md", "x")
    monkeypatch.setattr(search, "LIST_MAX_NOTES", 10)
    out = search.list_notes(kb, "box")
    assert out.startswith("30 note(s) in box/")
    assert len(re.findall(r"^box/", out, re.M)) == 10 and "20 more not shown" in out
    assert search.list_notes(kb, "../..").startswith("Error: ")


# ----------------------------------------------------------------------------------------------------
# Several processes on one new index

_RACE = """
import sys, search
from pathlib import Path
search.INDEX_BUSY_TIMEOUT_MS = 50  # the 5 s wait against a 10-20 s build of 45,000 notes, scaled down
search.INDEX_PROGRESS_AFTER_S = 0  # every process that indexes notes says so
print("ready", flush=True)
sys.stdin.read()  # all three start searching when the test closes their input
print(search.search_notes(Path(sys.argv[1]), "zephyr"))
"""


def test_processes_building_a_new_index_at_once_all_get_results_and_only_one_indexes(tmp_path, index_dir):
    kb = tmp_path / "many"
    for i in range(3000):
        write(kb, f"d{i % 30}/n{i}.md", f"# Note {i}\n\nA zephyr, number {i}.\n\n" + "Filler text. " * 40)
    env = dict(os.environ, **{config.INDEX_DIR_ENV: str(index_dir)})
    procs, errs = [], []
    for n in range(3):
        errs.append(tmp_path / f"err{n}.txt")
        with open(errs[-1], "w") as err:
            procs.append(subprocess.Popen([sys.executable, "-c", _RACE, str(kb)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                                          cwd=Path(search.__file__).parent))
    for proc in procs:
        assert proc.stdout.readline() == "ready\n"
    for proc in procs:
        proc.stdin.close()
    outs = [proc.stdout.read() for proc in procs]
    for proc in procs:
        proc.wait(timeout=120)
    stderr = [err.read_text() for err in errs]
    for out, err in zip(outs, stderr):
        assert out.startswith("3000 notes match") and "Error" not in out, (out, err)
        assert not re.search(r"error|locked|exists|memory|traceback", err, re.I), err
    assert sum("indexed 3000 notes" in err for err in stderr) == 1, stderr


def test_folder_swapped_for_a_link_leading_out_is_never_searched(kb, tmp_path, watch_mode):
    outside = tmp_path / "outside"
    write(outside, "secret.md", "# Secret\n\npassword hunter2 zebra\n")
    write(kb, "docs/readme.md", "# Docs\n\nzebra crossing\n")
    assert hits(search.search_notes(kb.resolve(), "zebra")) == ["docs/readme.md"]
    os.rename(kb / "docs", kb / "docs2")
    os.symlink(outside, kb / "docs")
    out = search.search_notes(kb.resolve(), "zebra")
    assert "hunter2" not in out and hits(out) == ["docs2/readme.md"]
