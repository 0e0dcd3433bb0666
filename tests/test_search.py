"""Tests for search.py and index.py: ranking, Chinese words, hostile queries, freshness, damage, sharing,
bounded output.

Real files in tmp_path, and the index in tmp_path too. Freshness tests run twice: with Linux inotify
(watch=True) and without it (every search then compares sizes and mtimes).
"""

import contextlib
import ctypes
import os
import re
import sqlite3
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import db  # noqa: E402
import index  # noqa: E402
import search  # noqa: E402
from conftest import hits, make_notebook, write  # noqa: E402

ToolError = search.ToolError
CAPABILITY_VERSION_3 = 0x20080522  # capget/capset's _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
READ_ANY_FILE = 1 << 1 | 1 << 2  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
HERE = Path(search.__file__).parent


@pytest.fixture(autouse=True)
def cold(notices):
    """The notices meant for the person."""
    return notices


@pytest.fixture
def index_dir(tmp_path):
    return tmp_path / "index"


@pytest.fixture
def watch(request):
    return getattr(request, "param", True)


@pytest.fixture
def notebook_of(index_dir, watch):
    """The test's Notebook of a notes folder, made on its first use; `watch` is the test's unless given."""
    made = {}

    def of(kb, watching=None):
        key = (kb, watch if watching is None else watching)
        if key not in made:
            made[key] = make_notebook(kb, index_dir=index_dir, search_watch=key[1])
        return made[key]
    yield of
    for notebook in made.values():
        notebook.close()


@pytest.fixture
def find(notebook_of):
    """search_notes for this test's index; `watch` is True unless the test asks for both modes."""
    return lambda kb, query, folder=None: search.search_notes(notebook_of(kb), query, folder)


@pytest.fixture
def listing(notebook_of):
    return lambda kb, folder=None: search.list_notes(notebook_of(kb), folder)


def pytest_generate_tests(metafunc):
    # Tests that name `watch` run with inotify and without; other tests search with inotify.
    if "watch" in metafunc.function.__code__.co_varnames[:metafunc.function.__code__.co_argcount]:
        metafunc.parametrize("watch", [True, False], ids=["inotify", "stat"], indirect=True)


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


# --- Ranking ---

def test_exact_title_comes_first_even_against_a_denser_note(kb, find):
    assert hits(find(kb, "python"))[:2] == ["python.md", "snakes.md"]


def test_title_match_ranks_above_body_mentions(kb, find):
    assert hits(find(kb, "bread"))[0] == "cooking/bread.md"


def test_notes_with_every_word_come_before_notes_with_some(kb, find):
    out = find(kb, "bread water")
    ranked = hits(out)
    # bread.md and pasta.md hold both words; japan.md only "bread", so it comes after them.
    assert set(ranked[:2]) == {"cooking/bread.md", "cooking/pasta.md"}
    assert ranked[2] == "travel/japan.md"
    assert out.startswith('3 notes match "bread water" (2 with every word), best first:')


def test_word_order_and_case_do_not_matter(kb, find):
    assert hits(find(kb, "WATER flour"))[0] == "cooking/bread.md"


def test_singular_and_plural_find_each_other_but_words_are_not_stemmed(kb, find):
    assert hits(find(kb, "temple"))[0] == "travel/japan.md"  # the note says "temples"
    assert hits(find(kb, "degree"))[0] == "cooking/bread.md"
    assert "No notes" in find(kb, "baking")  # "Bake" is another word: stemming ranked the wrong pages up


@pytest.mark.parametrize("query, note", [("tomatoes", "tomato.md"), ("tomato", "tomatoes.md"), ("box", "boxes.md"),
                                         ("libraries", "library.md"), ("library", "libraries.md")])
def test_irregular_plurals_and_singulars_meet(tmp_path, find, query, note):
    root = tmp_path / "garden"
    write(root, "tomato.md", "# Planting\n\nOne tomato plant per pot.\n")
    write(root, "tomatoes.md", "# Harvest\n\nPick the tomatoes when red.\n")
    write(root, "boxes.md", "# Moving\n\nStack the boxes by the door.\n")
    write(root, "library.md", "# Town\n\nThe library opens at nine.\n")
    write(root, "libraries.md", "# Code\n\nThird-party libraries we use.\n")
    assert note in hits(find(root, query))


def test_a_question_ranks_first_the_note_its_keywords_rank_first(tmp_path, find):
    """A small model passes the person's sentence whole: its framing words must not outweigh the content words."""
    root = tmp_path / "garden"
    write(root, "tomatoes.md", "# Tomatoes\n\nWater the tomato plants deeply twice a week in summer.\n")
    write(root, "faq.md", "# Questions\n\nHow do I do it? Is there a way? How often should I ask, and what can I do "
                          "with my time?\n")
    write(root, "lawn.md", "# Lawn\n\nWater the lawn often in summer; water it early.\n")
    assert hits(find(root, "water tomatoes"))[0] == "tomatoes.md"
    out = find(root, "How often should I water my tomatoes?")
    assert hits(out)[0] == "tomatoes.md", out


def test_a_chinese_question_ranks_first_the_note_its_keywords_rank_first(tmp_path, find):
    # "where", "how much" and "about" are framing too: 在哪 and 多少 matched a diary line's 是在 … 买的
    root = tmp_path / "garden"
    write(root, "第一次买域名.md", "# 第一次买域名的经验\n\n- 在阿里云，9元1年，买了这个域名\n")
    write(root, "2022-07-01.md", "# 2022-07-01\n\n- 域名是在阿里云买的，这里能买到吗？多少人在哪儿都大概是这么买的。\n")
    assert hits(find(root, "第一次 买 域名 钱"))[0] == "第一次买域名.md"
    out = find(root, "我第一次买域名是在哪买的，花了多少钱？")
    assert hits(out)[0] == "第一次买域名.md", out


def test_where_no_note_has_every_word_the_note_with_more_of_them_ranks_first(tmp_path, find):
    # An English question about a Chinese note: it has four of the six words once each, and bm25 put ten short
    # English notes with two or three of them above it (20th in a real vault: the note never reached a small model)
    root = tmp_path / "garden"
    write(root, "access.md", "# 笔记组织法\n\n" + "根据自身情况，做了小小的改变。\n" * 80
          + "Folders or links: the ACCESS system.\n\n- Inbox，原名 Encounters\n")
    for name in ("calendar", "extras", "atlas", "cards", "sources"):
        write(root, f"{name}.md", f"# {name}\n\nup:: ACCESS\nThis folder called {name}: a folder called {name}.\n")
    for n in range(6):
        write(root, f"inbox{n}.md", f"# Inbox {n}\n\nAn inbox zero day, a system for mail.\n")
    out = find(root, "In my ACCESS folder system, what was the Inbox originally called?")
    assert hits(out)[0] == "access.md", out
    assert "Inbox，原名 Encounters" in out
    assert hits(find(root, "In my ACCESS folder system 工具, what was the Inbox originally called?"))[0] == "access.md"


def test_a_hit_shows_the_lines_of_the_words_rare_in_the_note_not_only_those_it_repeats(tmp_path, find):
    root = tmp_path / "kb"
    write(root, "method.md", "# Method\n\n" + "".join(f"- the method, step {n}\n" for n in range(1, 9))
          + "\nThe inbox was first called Encounters.\n")
    out = find(root, "method inbox")
    assert "The inbox was first called Encounters." in out, out


def test_framing_words_of_a_question_are_not_required(kb, find):
    out = find(kb, "Is there a way to bake bread?")
    assert out.startswith('3 notes match "Is there a way to bake bread?" (1 with every word), best first:'), out
    assert hits(out)[0] == "cooking/bread.md"


def test_quoted_phrase_must_appear_in_that_order(kb, find):
    assert hits(find(kb, '"bread crumbs"')) == ["cooking/pasta.md"]
    assert "No notes" in find(kb, '"crumbs bread"')


def test_hits_show_title_and_matching_lines_with_numbers(kb, find):
    out = find(kb, "temples")
    day = date.fromtimestamp((kb / "travel/japan.md").stat().st_mtime)  # no day in its name nor properties
    assert out == ('1 note matches "temples", best first:\n\n'
                   f"travel/japan.md — Trip to Japan ({day}, modified)\n  3: Kyoto temples; bread is rare at breakfast.")


def test_a_comment_in_a_code_block_is_not_the_notes_title(kb, find):
    write(kb, "setup.md", "```bash\n# install deps\npip install x\n```\n\n# Real title\n\nThe setup steps.\n")
    write(kb, "tilde.md", "~~~\n# not this\n~~~\n")  # no heading outside the code: the name is its title
    assert "setup.md — Real title (" in find(kb, "setup steps")
    assert "tilde.md — tilde (" in find(kb, "tilde")


def test_note_found_by_its_path_alone_shows_its_opening_line(kb, find):
    write(kb, "recipes/soup.md", "# Soup\n\nLeeks and potatoes.\n")
    assert re.search(r"^recipes/soup.md — Soup \(.*\)\n  3: Leeks and potatoes.$", find(kb, "recipes"), re.M)


def test_no_match_says_so_without_error(kb, find):
    assert find(kb, "zeppelin") == 'No notes match "zeppelin". Try fewer or different words.'


def test_a_megabyte_query_is_read_only_as_far_as_a_query_goes(kb, find):
    assert "No notes match" in find(kb, "z" * 1_000_000 + " python")  # a word past the first 2,000 characters
    assert "python.md" in find(kb, "z" * 1_000 + " python")


def test_only_some_words_matching_says_so(kb, find):
    out = find(kb, "temples zeppelin")
    assert out.startswith('No note has every word of "temples zeppelin"; 1 note has some of them, best first:')
    assert hits(out) == ["travel/japan.md"]


def test_folder_filter_keeps_only_that_folder(kb, find):
    assert hits(find(kb, "bread", folder="travel")) == ["travel/japan.md"]
    assert find(kb, "flour", folder="travel").startswith('No note in travel/ has the words of "flour"; in all the notes')


@pytest.mark.parametrize("folder", ["", " ", ".", "/", "cooking/.."])
def test_folder_naming_the_notes_folder_itself_means_all_notes(kb, find, listing, folder):
    assert set(hits(find(kb, "bread", folder=folder))) == {"cooking/bread.md", "cooking/pasta.md", "travel/japan.md"}
    assert listing(kb, folder).startswith("7 note(s) in the knowledge base")


@pytest.mark.parametrize("folder", ["../", "/etc", ".history"])
def test_a_folder_outside_or_hidden_is_an_error_the_model_can_act_on(kb, find, folder):
    (kb / ".history").mkdir()
    with pytest.raises(ToolError):
        find(kb, "bread", folder=folder)


@pytest.mark.parametrize("folder", ["nope", "python.md", "archive/old-ideas"])
def test_a_folder_that_does_not_exist_searches_every_note_and_says_so(kb, find, folder):
    """Small models copy a description's example folder ('work') or make one up; the search failed and neither model
    recovered. Now the whole notes are searched, and the result says why."""
    write(kb, "python.md", "# Python\n\nbread dough rises\n")
    found = find(kb, "bread", folder=folder)
    assert found.startswith(f'(There is no folder "{folder}" in the notes, so all of them were searched.)\n')
    assert "python.md" in hits(found)


# --- Chinese and mixed queries ---

@pytest.mark.parametrize("word, note", [("学习", "zh/读书.md"), ("概念", "zh/读书.md"),
                                        ("编辑", "zh/编辑器.md"), ("读书", "zh/读书.md")])
def test_two_character_chinese_words_inside_sentences_are_found(kb, find, word, note):
    assert hits(find(kb, word))[0] == note


def test_longer_chinese_term_ranks_whole_matches_before_scattered_pairs(kb, find):
    write(kb, "zh/scattered.md", "# 机器 学习\n\n机器很好。学习也好。\n")  # a title weighs more, yet comes after
    assert hits(find(kb, "机器学习")) == ["zh/读书.md", "zh/scattered.md"]


def test_single_chinese_character_is_found_anywhere_in_a_run(kb, find):
    assert set(hits(find(kb, "器"))) == {"zh/读书.md", "zh/编辑器.md"}


def test_mixed_chinese_and_english_query(kb, find):
    assert hits(find(kb, "Vim 编辑"))[0] == "zh/编辑器.md"
    assert hits(find(kb, "用Vim"))[0] == "zh/编辑器.md"


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
def test_chinese_written_without_spaces_finds_notes_with_its_words(zh_kb, find, query, best):
    out = find(zh_kb, query)
    assert hits(out)[0] == best, out
    assert "en.md" not in hits(out)


@pytest.mark.parametrize("query", ["怎么压缩文件？", "如何压缩文件", "我想压缩文件", "有没有办法压缩文件"])
def test_chinese_question_words_are_not_required(zh_kb, find, query):
    out = find(zh_kb, query)
    assert hits(out)[0] == "gzip.md" and "(1 with every word)" in out, out


def test_chinese_run_ranks_phrase_then_every_word_then_any_word(zh_kb, find):
    write(zh_kb, "phrase.md", "解压文件？看这里。\n")
    write(zh_kb, "apart.md", "文件解压。压文？\n")  # every 2-character word of the query, not in a row
    write(zh_kb, "one.md", "# 解压\n\n解压，解压，解压。\n")  # only one word, but in the title and often
    out = find(zh_kb, "解压文件")
    ranked = hits(out)
    assert sorted(ranked[:2]) == ["gzip.md", "phrase.md"] and ranked[2] == "apart.md", out
    assert ranked.index("unzip.md") < ranked.index("one.md")  # more of the query's words beat one word
    assert "(3 with every word)" in out
    assert "1: 解压文件？看这里。" in out


def test_mixed_chinese_and_latin_run_is_split_where_the_script_changes(zh_kb, find):
    write(zh_kb, "howto.md", "# 笔记\n\n解压ZIP文件的方法。\n")
    out = find(zh_kb, "解压zip文件")
    assert hits(out)[:2] == ["howto.md", "unzip.md"], out
    assert "3: 解压ZIP文件的方法。" in out and "3: > 从 ZIP 压缩包中解压出文件。" in out


def test_matching_chinese_line_is_shown(kb, find):
    assert "3: 今天学习了机器学习的基本概念" in find(kb, "深度学习")


# --- Queries that would break a naive FTS5 query ---

@pytest.mark.parametrize("query", ['"', 'bread"', '"bread', "bread*", "*", "-bread", "bread -water",
                                   "bread AND", "AND", "(bread", "bread)", "bread OR (water",
                                   "NEAR(bread water)", "bread:", "title:bread", "^bread", "bread + water",
                                   "{bread}", "'bread'", "c++", "a.b", "\\", "100%"])
def test_fts5_operator_characters_are_plain_text(kb, find, query):
    try:
        out = find(kb, query)
    except ToolError as e:  # only a query with no words at all may be refused
        assert "no words" in str(e) and not re.search(r"[^\W_]", query)
        return
    assert "syntax" not in out.lower() and "fts5" not in out.lower()
    if "bread" in query:
        assert "cooking/bread.md" in hits(out)


@pytest.mark.parametrize("word", ["NOT", "AND", "OR", "NEAR"])
def test_upper_case_operators_are_searched_as_words(kb, find, word):
    write(kb, "ops.md", "# Operators\n\nDo not panic, near or far, and smile.\n")
    assert "ops.md" in hits(find(kb, word))
    assert hits(find(kb, f"panic {word}"))[0] == "ops.md"


@pytest.mark.parametrize("query", [" ( * - ", "", "   "])
def test_query_with_no_words_is_a_clear_error(kb, find, query):
    with pytest.raises(ToolError, match="no words"):
        find(kb, query)


# --- Freshness: outside edits, renames, deletions; the agent's own changes ---

def test_outside_edit_is_found_by_the_next_search(kb, find, watch):
    find(kb, "bread")
    write(kb, "travel/japan.md", "# Trip to Japan\n\nOnsen and ramen.\n")
    assert hits(find(kb, "ramen")) == ["travel/japan.md"]
    assert "travel/japan.md" not in hits(find(kb, "bread"))


def test_new_note_in_a_new_folder_is_found(kb, find, watch):
    find(kb, "bread")
    write(kb, "new/deep/er/idea.md", "# Idea\n\nA zeppelin garden.\n")
    assert hits(find(kb, "zeppelin")) == ["new/deep/er/idea.md"]
    write(kb, "new/deep/er/later.md", "Another zeppelin.\n")  # the new folders are watched too
    assert set(hits(find(kb, "zeppelin"))) == {"new/deep/er/idea.md", "new/deep/er/later.md"}


def test_renamed_and_deleted_notes_leave_the_results(kb, find, watch):
    find(kb, "bread")
    (kb / "cooking/bread.md").rename(kb / "cooking/levain.md")
    (kb / "cooking/pasta.md").unlink()
    out = find(kb, "bread")
    assert "cooking/levain.md" in hits(out)
    assert not {"cooking/bread.md", "cooking/pasta.md"} & set(hits(out))


def test_renamed_and_deleted_folders_are_followed(kb, find, watch):
    find(kb, "bread")
    (kb / "cooking").rename(kb / "kitchen")
    assert set(hits(find(kb, "water"))) == {"kitchen/bread.md", "kitchen/pasta.md"}
    write(kb, "kitchen/soup.md", "Water and leeks.\n")  # the moved folder is still watched
    assert "kitchen/soup.md" in hits(find(kb, "leeks"))
    for note in (kb / "kitchen").iterdir():
        note.unlink()
    (kb / "kitchen").rmdir()
    assert "No notes" in find(kb, "water")


def test_agent_write_is_indexed_even_when_size_and_mtime_look_unchanged(kb, notebook_of):
    search.search_notes(notebook_of(kb, False), "bread")  # no inotify: only size+mtime would notice
    path = kb / "python.md"
    before = path.stat()
    path.write_text("# Python\n\nNotes on the zebra ok.\n", encoding="utf-8")  # same length as before
    assert path.stat().st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    notebook_of(kb, False).changed("python.md")
    assert hits(search.search_notes(notebook_of(kb, False), "zebra")) == ["python.md"]


def test_agent_changes_reported_by_the_tools_show_in_the_next_search(kb, find, notebook_of, watch):
    def changed(*paths):
        for path in paths:
            notebook_of(kb).changed(path)

    assert "cooking/bread.md" in hits(find(kb, "flour"))
    write(kb, "garden/tomatoes.md", "# Tomatoes\n\nStake them.\n")
    changed("garden/tomatoes.md")
    assert hits(find(kb, "stake")) == ["garden/tomatoes.md"]
    write(kb, "garden/tomatoes.md", "# Tomatoes\n\nPrune them.\n")
    changed("garden/tomatoes.md")
    assert hits(find(kb, "prune")) == ["garden/tomatoes.md"]
    (kb / "veg").mkdir()
    (kb / "garden/tomatoes.md").rename(kb / "veg/tomatoes.md")
    changed("garden/tomatoes.md", "veg/tomatoes.md")
    assert hits(find(kb, "prune", folder="veg")) == ["veg/tomatoes.md"]
    (kb / "veg/tomatoes.md").unlink()
    changed("veg/tomatoes.md")
    assert "No notes" in find(kb, "prune")


def test_note_changed_never_raises_nor_reaches_outside(kb, tmp_path, notebook_of, find):
    notebook_of(kb).changed("no/such/note.md")  # nothing open yet
    find(kb, "bread")
    write(tmp_path, "outside/leak.md", "quasar")
    write(tmp_path, "outside.md", "quasar")
    for rel in ("no/such/note.md", "../outside.md", "../outside", str(tmp_path / "outside.md"), "", ".history"):
        notebook_of(kb).changed(rel)
    notebook_of(kb / "missing").changed("x.md")
    assert "No notes" in find(kb, "quasar")


def test_index_lives_outside_the_notes_and_is_reused(kb, index_dir, find, notebook_of, cold):
    before = sorted(p.relative_to(kb) for p in kb.rglob("*"))
    find(kb, "bread")
    assert sorted(p.relative_to(kb) for p in kb.rglob("*")) == before
    assert [p.name for p in index_dir.glob("*.sqlite")] == [index.index_path(kb, index_dir).name]
    notebook_of(kb).close()
    (kb / "python.md").unlink()  # while no process had the index open
    assert "cooking/bread.md" in hits(find(kb, "bread"))
    assert "No notes" in find(kb, "language")
    assert cold == []  # reusing an index needs no notice


def test_each_notes_folder_has_its_own_index_file(tmp_path, index_dir):
    assert index.index_path(tmp_path / "kb", index_dir).parent == index_dir
    assert index.index_path(tmp_path / "kb", index_dir) != index.index_path(tmp_path / "other" / "kb", index_dir)


def test_two_notes_folders_each_have_their_own_index_and_both_stay_right(kb, tmp_path, find):
    other = tmp_path / "other"
    write(other, "moon.md", "# Moon\n\nCraters.\n")
    find(kb, "bread")
    assert hits(find(other, "craters")) == ["moon.md"]
    write(kb, "late.md", "Craters of bread.\n")  # changed while the other index was open
    assert hits(find(kb, "craters")) == ["late.md"]


# --- Damage and sharing ---

def test_corrupt_index_is_rebuilt_with_a_one_line_notice(kb, find, notebook_of, index_dir, cold):
    find(kb, "bread")
    notebook_of(kb).close()
    path = index.index_path(kb, index_dir)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"this is not a database" * 1000)
    assert hits(find(kb, "bread"))[0] == "cooking/bread.md"
    assert len(cold) == 1 and "rebuilding" in cold[0] and "\n" not in cold[0]


def test_index_of_another_version_is_rebuilt_with_a_one_line_notice(kb, find, notebook_of, index_dir, cold):
    find(kb, "bread")
    notebook_of(kb).close()
    with sqlite3.connect(index.index_path(kb, index_dir)) as other:
        other.execute("PRAGMA user_version = 3")
    other.close()
    assert hits(find(kb, "bread"))[0] == "cooking/bread.md"
    assert len(cold) == 1 and "another version" in cold[0] and "rebuilding" in cold[0]


def test_index_damaged_while_open_is_rebuilt(kb, find, index_dir, cold):
    find(kb, "bread")
    other = sqlite3.connect(index.index_path(kb, index_dir))
    other.execute("DROP TABLE notes")  # what a damaged file looks like to the next query
    other.close()
    assert hits(find(kb, "bread"))[0] == "cooking/bread.md"
    assert len(cold) == 1 and "rebuilding" in cold[0]


def test_unusable_index_folder_is_a_one_line_error(kb, tmp_path, cold):
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    with pytest.raises(ToolError) as error:
        search.search_notes(make_notebook(kb, index_dir=blocker / "index"), "bread")
    assert "\n" not in str(error.value) and "search index" in str(error.value)
    assert len(cold) == 1 and str(blocker) in cold[0]


def test_default_notice_is_one_line_on_stderr():
    told = subprocess.run([sys.executable, "-c", "import db; db.notice('hello')"], cwd=HERE, capture_output=True,
                          text=True, timeout=60)  # nobody set up a way to show it: Python's last resort, one line
    assert told.stderr == "hello\n"


def test_another_process_can_use_the_same_index(kb, index_dir, find, watch):
    find(kb, "bread")  # this process keeps the index open
    code = ("import sys, search; from pathlib import Path; sys.path.insert(0, 'tests'); from conftest import "
            "make_notebook; print(search.search_notes(make_notebook(Path(sys.argv[1]), index_dir=Path(sys.argv[2])), "
            "'flour'))")
    other = subprocess.run([sys.executable, "-c", code, str(kb), str(index_dir)], capture_output=True,
                           text=True, cwd=HERE, timeout=60)
    assert "cooking/bread.md" in other.stdout, other.stderr
    write(kb, "late.md", "Flour again.\n")
    (kb / "cooking/bread.md").unlink()
    subprocess.run([sys.executable, "-c", code, str(kb), str(index_dir)], cwd=HERE, capture_output=True,
                   timeout=60)  # the other process indexes both changes first
    assert hits(find(kb, "flour")) == ["late.md"]
    check = sqlite3.connect(index.index_path(kb, index_dir)).execute("PRAGMA integrity_check").fetchone()
    assert check == ("ok",)


def test_index_locked_too_long_by_another_process_is_a_one_line_error_then_catches_up(kb, find, index_dir, notebook_of,
                                                                                      watch, monkeypatch, cold):
    find(kb, "bread")
    notebook_of(kb).close()
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.01)
    monkeypatch.setattr(db, "LONG_WAIT_S", 0.01)
    find(kb, "bread")
    write(kb, "late.md", "Bread, written while another process builds the index.\n")
    other = sqlite3.connect(index.index_path(kb, index_dir), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # what a long first build in another process looks like
    try:
        with pytest.raises(ToolError) as error:
            find(kb, "bread")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert "\n" not in str(error.value) and "another knowledge-agent is writing" in str(error.value)
    assert any("waiting for it" in notice for notice in cold)
    assert "late.md" in hits(find(kb, "bread"))  # the next search catches up


def test_slow_first_build_reports_progress(kb, find, monkeypatch, cold):
    monkeypatch.setattr(index, "INDEX_PROGRESS_AFTER_S", 0)
    monkeypatch.setattr(index, "INDEX_BATCH", 2)
    find(kb, "bread")
    assert cold[0].startswith("indexing 7 notes") and cold[-1].startswith("indexed 7 notes in")


_RACE = """
import sys, db, index, search
from pathlib import Path
sys.path.insert(0, "tests")
from conftest import make_notebook
db.BUSY_TIMEOUT_S = 0.05  # the 5 s wait against a 10-20 s build of 45,000 notes, scaled down
index.INDEX_PROGRESS_AFTER_S = 0  # every process that indexes notes says so
print("ready", flush=True)
sys.stdin.read()  # all three start searching when the test closes their input
print(search.search_notes(make_notebook(Path(sys.argv[1]), index_dir=Path(sys.argv[2])), "zephyr"))
"""


def test_processes_building_a_new_index_at_once_all_get_results_and_only_one_indexes(tmp_path, index_dir):
    kb = tmp_path / "many"
    for i in range(3000):
        write(kb, f"d{i % 30}/n{i}.md", f"# Note {i}\n\nA zephyr, number {i}.\n\n" + "Filler text. " * 40)
    procs, errs = [], []
    for n in range(3):
        errs.append(tmp_path / f"err{n}.txt")
        with open(errs[-1], "w") as err:
            procs.append(subprocess.Popen([sys.executable, "-c", _RACE, str(kb), str(index_dir)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                          text=True, cwd=HERE))
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
        assert not re.search(r"error|locked|exists|cannot|traceback", err, re.I), err
    assert sum("indexed 3000 notes" in err for err in stderr) == 1, stderr


# --- Which files count ---

def test_odd_names_are_notes_and_hidden_or_foreign_files_are_skipped(kb, find):
    for name in ("..md", "!.md", "((.md", "[.md"):
        write(kb, f"odd/{name}", "Quasar notes.\n")
    write(kb, ".obsidian/cache.md", "quasar")
    write(kb, ".history/old.md", "quasar")
    write(kb, "cooking/.hidden/x.md", "quasar")
    write(kb, "cooking/.x.md", "quasar")
    write(kb, "image.png", "quasar")
    write(kb, "notes.md.bak", "quasar")
    (kb / "broken.md").write_bytes(b"quasar \xff\xfe broken bytes")
    (kb / "binary.md").write_bytes(b"quasar\0\0\0")
    out = find(kb, "quasar")
    assert sorted(hits(out)) == sorted(["odd/..md", "odd/!.md", "odd/((.md", "odd/[.md", "broken.md"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="names are bytes on Linux only")
def test_notes_whose_names_are_not_utf8_are_counted_by_list_notes(kb, listing, find, watch):
    def unzipped(folder, name):  # a zip made on Chinese Windows keeps its GBK names on Linux
        with open(os.path.join(os.fsencode(kb / folder), name.encode("gbk") + b".md"), "wb") as note:
            note.write(b"quasar")
    unzipped("cooking", "笔记")
    told = "note file(s) not listed: their names are not UTF-8; rename them to see them here."
    assert listing(kb).endswith("\n1 " + told)
    unzipped("travel", "旧")  # and one more later: inotify hears of it
    assert "No notes" in find(kb, "quasar")
    assert listing(kb).endswith("\nFolders: cooking/ (2), travel/ (1), zh/ (2)\n2 "
                                                                   + told)
    assert listing(kb, "cooking").endswith("\n1 " + told)
    assert told not in listing(kb, "zh")
    odd_folder = os.path.join(os.fsencode(kb), "旧的".encode("gbk"))  # a folder named so, a UTF-8 note in it later
    os.mkdir(odd_folder)
    assert "No notes" in find(kb, "quasar")
    with open(os.path.join(odd_folder, b"new.md"), "wb") as note:
        note.write(b"quasar")
    assert "No notes" in find(kb, "quasar")  # not a crash
    assert listing(kb).endswith("\n3 " + told)


def test_hidden_folders_made_later_are_never_searched(kb, find, watch):
    find(kb, "bread")
    write(kb, ".history/cooking/bread.md.2026", "quasar")
    write(kb, ".trash/old.md", "quasar")
    write(kb, "cooking/.cache/x.md", "quasar")
    assert "No notes" in find(kb, "quasar")


def test_links_out_fifos_and_loops_added_later_are_never_indexed(kb, tmp_path, find, notebook_of, watch):
    find(kb, "bread")
    (tmp_path / "secret.md").write_text("quasar password", encoding="utf-8")
    os.symlink(tmp_path / "secret.md", kb / "out.md")
    os.symlink(kb / "python.md", kb / "inside.md")
    os.symlink(kb / "loop.md", kb / "loop.md")
    os.mkfifo(kb / "pipe.md")
    notebook_of(kb).changed("pipe.md")  # must not block on the FIFO
    notebook_of(kb).changed("out.md")
    assert "No notes" in find(kb, "quasar")
    assert set(hits(find(kb, "language"))) == {"python.md", "inside.md"}


def test_folder_swapped_for_a_link_leading_out_is_never_searched(kb, tmp_path, find, watch):
    outside = tmp_path / "outside"
    write(outside, "secret.md", "# Secret\n\npassword hunter2 zebra\n")
    write(kb, "docs/readme.md", "# Docs\n\nzebra crossing\n")
    assert hits(find(kb, "zebra")) == ["docs/readme.md"]
    os.rename(kb / "docs", kb / "docs2")
    os.symlink(outside, kb / "docs")
    out = find(kb, "zebra")
    assert "hunter2" not in out and hits(out) == ["docs2/readme.md"]
    with pytest.raises(ToolError, match="outside"):
        find(kb, "zebra", folder="docs")


@contextlib.contextmanager
def reading_as_an_ordinary_user():
    """This thread without root's right to read any file (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH): Linux keeps
    capabilities per thread, and the permitted set keeps them to take back after."""
    if os.geteuid() != 0:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header, sets = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0), (ctypes.c_uint32 * 6)()  # 0: this thread
    assert libc.capget(header, sets) == 0, os.strerror(ctypes.get_errno())
    effective = sets[0]
    sets[0] &= ~READ_ANY_FILE
    assert libc.capset(header, sets) == 0, os.strerror(ctypes.get_errno())
    try:
        yield
    finally:
        sets[0] = effective
        assert libc.capset(header, sets) == 0, os.strerror(ctypes.get_errno())


@pytest.mark.skipif(not sys.platform.startswith("linux") and getattr(os, "geteuid", lambda: 0)() == 0,
                    reason="no file can be made unreadable to this test run here: chmod does not on Windows, nor "
                           "for root outside Linux")
def test_unreadable_note_is_skipped_quietly(kb, find, cold):
    secret = write(kb, "secret.md", "quasar")
    secret.chmod(0)
    try:
        with reading_as_an_ordinary_user():
            with pytest.raises(PermissionError):
                secret.read_bytes()
            out = find(kb, "quasar")
    finally:
        secret.chmod(0o644)
    assert out.startswith("No notes") and cold == []


def test_huge_note_is_indexed_in_its_first_2_mb_only(kb, find):
    filler = ("lorem ipsum " * 9 + "\n") * (index.INDEX_MAX_NOTE_BYTES // 100)
    write(kb, "huge.md", "# Huge\n\nearlyword\n" + filler + "lateword\n")
    assert (kb / "huge.md").stat().st_size > index.INDEX_MAX_NOTE_BYTES
    assert hits(find(kb, "earlyword")) == ["huge.md"]
    assert "No notes" in find(kb, "lateword")


# --- Bounded output ---

def test_huge_match_set_is_bounded_and_counts_the_rest(tmp_path, find):
    kb = tmp_path / "big"
    for i in range(600):
        write(kb, f"n{i:03}.md", f"# Note {i}\n\n" + ("common word here. " * 50 + "\n") * 20)
    out = find(kb, "common word")
    assert len(out) <= search.SEARCH_OUTPUT_CHARS
    assert len(hits(out)) <= search.SEARCH_MAX_HITS
    shown = len(hits(out))
    assert out.endswith(f"({600 - shown} more matched; add words or a folder to narrow the search.)")
    assert all(len(line) <= search.SEARCH_LINE_CHARS + 12 for line in out.splitlines())


def test_huge_query_is_echoed_short_and_the_answer_stays_bounded(kb, find):
    query = " ".join(["bread"] + [f"word{i}" for i in range(20000)])[:100_000]
    for text in (query, "面包" * 50_000):
        out = find(kb, text)
        assert len(out) <= search.SEARCH_OUTPUT_CHARS, len(out)
        assert len(out.splitlines()[0]) < search.SEARCH_QUERY_ECHO_CHARS + 120
    assert "cooking/bread.md" in hits(find(kb, query))


def test_lone_surrogates_are_no_words_and_no_folder(kb, find, listing):
    """A folder that does not exist searches everything and says so: small models copy and invent folders."""
    write(kb, "archive.md", "# Archive\n\nUse tar for this.\n")
    assert hits(find(kb, "\ud800tar")) == ["archive.md"]
    for folder in ("\udc80x", "\ud800"):  # no such folder: all the notes, said so
        assert find(kb, "tar", folder=folder).startswith("(There is no folder ") and hits(find(kb, "tar")) == [
            "archive.md"]
        assert "so all of them are listed" in listing(kb, folder)


# --- Listing ---

def test_list_notes_counts_folders_and_shows_newest_first(kb, listing):
    os.utime(kb / "travel/japan.md", (2_000_000_000, 2_000_000_000))
    out = listing(kb)
    assert out.startswith("7 note(s) in the knowledge base, newest first:\ntravel/japan.md — Trip to Japan  (")
    assert out.endswith("Folders: cooking/ (2), travel/ (1), zh/ (2)")
    assert len(hits(out)) == 7


def test_list_notes_in_a_folder_and_capped(tmp_path, listing, monkeypatch):
    kb = tmp_path / "many"
    for i in range(30):
        write(kb, f"box/n{i:02}.md", "x")
    write(kb, "other.md", "x")
    monkeypatch.setattr(search, "LIST_MAX_NOTES", 10)
    out = listing(kb, "box")
    assert out.startswith("30 note(s) in box/")
    assert len(re.findall(r"^box/", out, re.M)) == 10
    assert out.endswith("… 20 more not shown; search_notes finds the others by their words.")
    assert "… 21 more not shown; give one of the folders below.\nFolders: box/ (30)" in listing(kb)
    assert listing(tmp_path / "empty") == "No notes in the knowledge base."
    with pytest.raises(ToolError):
        listing(kb, "../..")


def test_list_notes_sees_outside_changes(kb, listing, watch):
    assert "python.md" in listing(kb)
    (kb / "python.md").unlink()
    write(kb, "fresh.md", "# Fresh\n")
    out = listing(kb)
    assert "python.md —" not in out and "fresh.md — Fresh" in out
