"""Tests for vault.py: properties, tags, sections, excluded files, drawings, sync-conflict copies, daily notes
and the vault's style, on texts written as people write them in Obsidian vaults (CRLF, BOM, Chinese), and on a
real vault (knowledge-garden, skipped where conftest.GARDEN is absent)."""

import json
import os
import random
import re
import sys
import time
from datetime import date, datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import frontmatter  # noqa: E402
import vault  # noqa: E402



def note(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# --- Front matter ---

def test_front_matter_reads_what_vaults_hold():
    text = note("---",
                "title: 'It''s: a plan'",
                'quote: "say \\"hi\\"\\tthen: go\\u00e9"',
                "url: https://example.com/a#b",
                "time: 12:30",
                "score: 9.1",
                "empty:",
                "nothing: null",
                "# a comment line",
                "related: \"[[Other note]]\"",
                "up: [[Home]]",
                "flow: [a, 'b, c', \"d\"]  # trailing comment",
                "actor: Leonardo, Tom,",
                "  Christopher, Martin",
                "items:",
                "- one",
                "- two # not part of it",
                "indented:",
                "  - x",
                "  - 'y: z'",
                "cover: >-",
                "  https://example.com/",
                "  cover.jpg",
                "poem: |",
                "  line one",
                "    line two",
                "nested:",
                "  child: 1",
                "  other: 2",
                "map: {a: 1}",
                "---",
                "# Body")
    properties, body_start, raw = frontmatter.front_matter(text)
    assert properties == {
        "title": "It's: a plan", "quote": 'say "hi"\tthen: goé', "url": "https://example.com/a#b", "time": "12:30",
        "score": "9.1", "empty": None, "nothing": None, "related": "[[Other note]]", "up": "[[Home]]",
        "flow": ["a", "b, c", "d"], "actor": "Leonardo, Tom, Christopher, Martin", "items": ["one", "two"],
        "indented": ["x", "y: z"], "cover": "https://example.com/ cover.jpg", "poem": "line one\n  line two\n",
        "nested": "child: 1\nother: 2", "map": "{a: 1}"}
    assert body_start == 32 and text.splitlines()[body_start - 1] == "# Body"
    assert raw[0] == "title: 'It''s: a plan'" and len(raw) == 29


def test_tags_and_aliases_become_lists_of_strings_in_every_written_form():
    def listed(*lines):
        return frontmatter.front_matter(note("---", *lines, "---"))[0]

    assert listed("tags: a, b #c") == {"tags": ["a", "b"]}  # ` #c` is a YAML comment
    assert listed('tags: "#a, b c"') == {"tags": ["a", "b", "c"]}
    assert listed("tags: [devops/ci, '#日记']") == {"tags": ["devops/ci", "日记"]}
    assert listed("tags:", "  - 评论/少数派 macOS软件", "  - 2023") == {"tags": ["评论/少数派", "macOS软件", "2023"]}
    assert listed("tag: old", "Tags: [new, old]") == {"tags": ["old", "new"]}
    assert listed("tags:") == {"tags": []}
    assert listed("alias: K8s") == {"aliases": ["K8s"]}
    assert listed("aliases: k8s, Kubernetes cluster") == {"aliases": ["k8s", "Kubernetes cluster"]}
    assert listed("aliases:", '  - "眩晕, Vertigo"', "  - 迷魂记") == {"aliases": ["眩晕, Vertigo", "迷魂记"]}
    assert listed("aliases: [[k8s]]") == {"aliases": ["[[k8s]]"]}


def test_front_matter_with_bom_crlf_and_dots_closing():
    text = "\ufeff---\r\ntitle: 计划\r\ntags: [工作]\r\n...\r\n# 标题\r\n"
    properties, body_start, raw = frontmatter.front_matter(text)
    assert properties == {"title": "计划", "tags": ["工作"]} and body_start == 5 and raw == ["title: 计划", "tags: [工作]"]
    assert vault.headings(text) == [(5, 1, "标题")]


def test_no_front_matter_or_an_unclosed_one_gives_none():
    assert frontmatter.front_matter("# Title\n\ntitle: x\n") == ({}, 1, [])
    assert frontmatter.front_matter("---\ntitle: never closed\n\nbody\n") == ({}, 1, [])
    assert frontmatter.front_matter(" ---\ntitle: x\n---\n") == ({}, 1, [])  # Obsidian wants '---' at the very start
    assert frontmatter.front_matter("---\n---\nbody") == ({}, 3, [])


def test_unknown_shapes_never_crash():
    shapes = ["key: [unclosed", "key: [[a, b], c]", "key: {a: [1, 2]}", ": no key", "\tkey: tab", "key:value",
              "key: \"unclosed", "- orphan item", "? complex", "key: |+", "  only indented", "key: 'a' b",
              "key: \\u", 'key: "\\uZZZZ \\x4"', "&anchor: x", "key: *alias", "key: !!str 1", "…: ∞", "%YAML 1.2"]
    rng = random.Random(7)
    for _ in range(400):
        lines = rng.sample(shapes, rng.randint(1, 6))
        text = note("---", *lines, "---", "body #tag")
        properties, body_start, _ = frontmatter.front_matter(text)
        assert isinstance(properties, dict) and body_start == len(lines) + 3
        problem = frontmatter.front_matter_problem(text)
        assert problem is None or "\n" not in problem
        vault.tags_of(text)
    assert frontmatter.front_matter(note("---", "key: [unclosed", "key2: {a: 1", "---"))[0] == {
        "key": "[unclosed", "key2": "{a: 1"}


# --- Front matter a change would break ---

GOOD = note("---", "title: Plans", "tags:", "  - work", "aliases: [Plan]", "---", "", "# Plans", "text")


@pytest.mark.parametrize("old, new, expected", [
    ("title: Plans", "title: Re: Plans", r"line 2 \('title: Re: Plans'\): .*in quotes"),
    ("title: Plans", "title: Plans:", r"line 2 .*ending in ':'"),
    ("title: Plans", 'title: "Plans', r"line 2 .*quote is never closed"),
    ("title: Plans", 'title: "Plans" for 2025', r"line 2 .*text follows the closing quote"),
    ("title: Plans", "title Plans", r"line 2 \('title Plans'\) is not 'name: value'"),
    ("title: Plans", "title:Plans", r"line 2 .*space after its ':'"),
    ("title: Plans", "title: *draft*", r"line 2 .*starting with '\*' must be in quotes"),
    ("aliases: [Plan]", "aliases: [Plan", r"line 5 .*'\[' is never closed"),
    ("aliases: [Plan]", "aliases: [Plan] extra", r"line 5 .*text follows its closing bracket"),
    ("aliases: [Plan]", "aliases: [Plan]\ntags: x", r"line 6 .*repeats the property 'tags' of line 3"),
    ("aliases: [Plan]", "aliases: Plan\n- Other", r"line 6 .*list item under a property that has a value"),
    ("  - work", '  - work\n- "open', r"line 5 .*quote is never closed"),
    ("---\n\n# Plans", "\n# Plans", r"no closing '---' line"),
])
def test_an_edit_that_breaks_the_yaml_is_refused_naming_the_line(old, new, expected):
    assert GOOD.count(old) == 1 and frontmatter.front_matter_problem(GOOD) is None
    broken = GOOD.replace(old, new)
    problem = frontmatter.front_matter_broken(GOOD, broken)
    assert problem and re.search(expected, problem), problem
    assert "\n" not in problem


def test_front_matter_that_yaml_accepts_is_not_refused():
    fine = note("---", "", "# comment", "title: 'a: b'", 'quote: "x" # note', "url: http://a.b/c?d=e#f",
                "time: 10:30 meeting", "it: it's fine", "related: \"[[X]]\"", "up: [[Home]]", "tpl: {{meta.author}}",
                "list: [a, \"b, c\", it's]", "cover: >-", "  https://x.y/z: still fine here", "nested:",
                "  child: a: b", "items:", "- a", "  continued", "- 'b: c'", "date created: 2022-08-05",
                "中文键: 值", "empty:", "...", "body: not front matter: at all")
    assert frontmatter.front_matter_problem(fine) is None
    assert frontmatter.front_matter_problem("# No front matter\n---\nnot: [yaml\n") is None
    assert frontmatter.front_matter_problem("\ufeff---\r\ntitle: ok\r\n---\r\n") is None


def test_text_put_before_the_front_matter_is_refused_but_removing_it_is_not():
    moved = "# Plans\n\n" + GOOD
    assert "no longer start on line 1" in frontmatter.front_matter_broken(GOOD, moved)
    assert "no longer start on line 1" in frontmatter.front_matter_broken(GOOD.replace("\n", "\r\n"), "\r\n" + GOOD)
    assert frontmatter.front_matter_broken(GOOD, GOOD.split("---\n", 2)[2]) is None  # the person asked to drop them
    assert frontmatter.front_matter_broken(GOOD, GOOD.replace("work", "home")) is None
    assert frontmatter.front_matter_broken("# Plain note\n", "intro\n# Plain note\n") is None
    assert frontmatter.front_matter_broken("---\n---\nbody\n---\nmore\n", "body\n---\nmore\n") is None


def test_a_change_to_a_note_already_broken_is_not_refused():
    broken = GOOD.replace("title: Plans", "title: Re: Plans")
    assert frontmatter.front_matter_problem(broken)
    assert frontmatter.front_matter_broken(broken, broken + "more\n") is None


# --- Tags ---

def test_inline_tags_follow_obsidians_rules():
    text = note("---", "tags: [from-yaml]", "title: '#not-a-tag'", "# comment: #neither", "---",
                "# Heading is not a tag",
                "#top and #中文标签 and #devops/scheduling/ and #multi-word_tag, #2024 #2024/12 #y2024",
                "a#glued https://x.com/page#anchor [[Note#Heading]] [l](#anchor) \\#escaped (#paren)",
                "`#in-code` and ``#double `code` span`` then #after-code",
                "```bash", "# shell comment #fenced", "```",
                "~~~~", "#tilde-fenced", "~~~~",
                "    ```", "#still-fenced", "    ```",
                "- item #list-tag。 #标签，后面")
    assert vault.tags_of(text) == {"from-yaml", "top", "中文标签", "devops/scheduling", "multi-word_tag", "y2024",
                                   "after-code", "list-tag", "标签"}


def test_tags_of_crlf_note_without_front_matter():
    assert vault.tags_of("Line one #alpha\r\n```\r\n#beta\r\n```\r\n#gamma\r\n") == {"alpha", "gamma"}
    assert vault.tags_of("no tags here # at all\n") == set()


def test_query_tags_are_taken_out_of_a_search():
    assert vault.query_tags("#devops deploy tag:k8s tag:#工作 c# x#y") == (["devops", "k8s", "工作"], "deploy c# x#y")
    assert vault.query_tags("#2024 plans") == ([], "#2024 plans")


# --- Sections ---

SECTIONS = note("---", "title: Guide", "# not a heading: a YAML comment", "---",
                "# Guide",                      # 5
                "intro",
                "## **Install** `tool`",        # 7
                "### Linux",                    # 8
                "apt install",
                "```",
                "# not a heading",
                "```",
                "### macOS",                    # 13
                "brew install",
                "",
                "## Uninstall ##",              # 16
                "### Linux",                    # 17
                "apt remove",
                "",
                "",
                "## See [[Other note|also]]",   # 21
                "#tag-not-heading",
                "## 中文 标题",                  # 23
                "内容")


def test_headings_skip_front_matter_and_code():
    assert vault.headings(SECTIONS) == [
        (5, 1, "Guide"), (7, 2, "**Install** `tool`"), (8, 3, "Linux"), (13, 3, "macOS"), (16, 2, "Uninstall"),
        (17, 3, "Linux"), (21, 2, "See [[Other note|also]]"), (23, 2, "中文 标题")]
    assert vault.headings("Title\n=====\n\ntext\n---\n") == []  # Setext headings are not read


def test_find_section_by_name_without_case_or_marks():
    assert vault.find_section(SECTIONS, "install tool") == (7, 15)
    assert vault.find_section(SECTIONS, "## INSTALL TOOL") == (7, 15)
    assert vault.find_section(SECTIONS, "macos") == (13, 15)
    assert vault.find_section(SECTIONS, "Uninstall") == (16, 20)
    assert vault.find_section(SECTIONS, "see also") == (21, 22)
    assert vault.find_section(SECTIONS, "中文  标题") == (23, 24)
    assert vault.find_section(SECTIONS, "Guide") == (5, 24)


def test_repeated_heading_names_need_parent_child():
    with pytest.raises(ValueError) as error:
        vault.find_section(SECTIONS, "Linux")
    message = str(error.value)
    assert "2 headings match 'Linux'" in message and "'Parent > Child'" in message
    assert "Guide > **Install** `tool` > Linux (line 8)" in message and "Guide > Uninstall > Linux (line 17)" in message
    assert vault.find_section(SECTIONS, "Install tool > Linux") == (8, 12)
    assert vault.find_section(SECTIONS, "uninstall > linux") == (17, 20)
    assert vault.find_section(SECTIONS, "Guide > Uninstall > Linux") == (17, 20)
    with pytest.raises(ValueError):
        vault.find_section(SECTIONS, "Uninstall > Guide > Linux")  # the order counts


def test_an_unknown_heading_lists_the_notes_headings_bounded():
    with pytest.raises(ValueError) as error:
        vault.find_section(SECTIONS, "Configure")
    message = str(error.value)
    assert message.startswith("no heading 'Configure' in the note. Its headings: Guide (line 5); **Install**")
    assert "Guide > Uninstall > Linux (line 17)" in message and "\n" not in message
    many = "".join(f"## Part {n}\ntext\n" for n in range(1, 101))
    with pytest.raises(ValueError) as error:
        vault.find_section(many, "Part 0")
    assert "Part 40 (line 79); and 60 more." in str(error.value) and "Part 41" not in str(error.value)
    with pytest.raises(ValueError, match="no headings"):
        vault.find_section("just text\n", "Intro")
    with pytest.raises(ValueError, match="name the heading"):
        vault.find_section(SECTIONS, " ## ")


def test_outline_indents_by_level_and_stays_bounded():
    def outline(text):
        return [line for _, line in vault.outline(text)]

    assert outline(SECTIONS) == [
        "Guide (line 5)", "  **Install** `tool` (line 7)", "    Linux (line 8)", "    macOS (line 13)",
        "  Uninstall (line 16)", "    Linux (line 17)", "  See [[Other note|also]] (line 21)", "  中文 标题 (line 23)"]
    assert vault.outline("no headings\n") == []
    deep = "".join(f"## Chapter {c}\n" + "".join(f"### Part {c}.{p}\n" for p in range(5)) for c in range(30))
    lines = outline(deep)
    assert lines[0] == "Chapter 0 (line 1)" and len(lines) == 31 and lines[-1] == "… 150 more headings not shown"
    wide = "".join(f"# H{n}\n" for n in range(100))
    assert vault.outline(wide)[-1] == (None, "… 20 more headings not shown")


def test_append_to_section_lands_before_the_blank_lines_and_the_next_heading():
    result = vault.append_to_section(SECTIONS, "Uninstall > Linux", "- also purge\n")
    lines = result.splitlines()
    assert lines[17:21] == ["apt remove", "- also purge", "", ""] and lines[21] == "## See [[Other note|also]]"
    assert result.replace("- also purge\n", "", 1) == SECTIONS
    in_code = vault.append_to_section(SECTIONS, "Install tool > Linux", "snap install")
    assert in_code.splitlines()[11:14] == ["```", "snap install", "### macOS"]
    empty = vault.append_to_section("# A\n## B\n## C\n", "B", "new")
    assert empty == "# A\n## B\nnew\n## C\n"


def test_append_to_section_keeps_crlf_bom_and_a_missing_final_newline():
    text = "\ufeff# 日记\r\n\r\n## 今天\r\n- 起床\r\n\r\n## 明天\r\n- 计划"
    result = vault.append_to_section(text, "今天", "- 读书\n- 写作")
    assert result == "\ufeff# 日记\r\n\r\n## 今天\r\n- 起床\r\n- 读书\r\n- 写作\r\n\r\n## 明天\r\n- 计划"
    assert vault.append_to_section(text, "明天", "- 休息") == text + "\r\n- 休息"
    with pytest.raises(ValueError, match="no heading '后天'"):
        vault.append_to_section(text, "后天", "x")


# --- Excluded files, drawings, sync-conflict copies ---

def write_settings(kb: Path, name: str, value) -> None:
    (kb / ".obsidian").mkdir(parents=True, exist_ok=True)
    (kb / ".obsidian" / name).write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")


def test_excluded_files_follow_user_ignore_filters(tmp_path):
    write_settings(tmp_path, "app.json", {"userIgnoreFilters": ["Archive/", "Templates/Daily.md", r"/\.draft\.md$/",
                                                                 "/[unclosed/", "", 3, None]})
    filters = vault.ignore_filters(tmp_path)
    assert len(filters) == 3
    excluded = ["Archive/old.md", "Archive/2020/deep.md", "Templates/Daily.md", "notes/idea.draft.md"]
    kept = ["Archived.md", "archive/lower.md", "Templates/Weekly.md", "notes/draft.md", "idea.md"]
    assert [vault.is_excluded(p, filters) for p in excluded] == [True] * 4
    assert [vault.is_excluded(p, filters) for p in kept] == [False] * 5


@pytest.mark.parametrize("content", ["{not json", '"a string"', '{"userIgnoreFilters": "Archive/"}', "", "\xff",
                                     '{"userIgnoreFilters": null}', "[" * 100000])
def test_malformed_settings_count_as_unset(tmp_path, content):
    write_settings(tmp_path, "app.json", content)
    write_settings(tmp_path, "daily-notes.json", content)
    assert vault.ignore_filters(tmp_path) == []
    assert vault.vault_style(tmp_path) == {} and vault.style_prompt(tmp_path) == ""
    assert vault.daily_note_settings(tmp_path) == {"folder": "", "format": "YYYY-MM-DD", "template": ""}


def test_settings_are_never_read_through_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    write_settings(elsewhere, "app.json", {"userIgnoreFilters": ["Archive/"], "useMarkdownLinks": True})
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / ".obsidian").symlink_to(elsewhere / ".obsidian")
    assert vault.ignore_filters(kb) == [] and vault.style_prompt(kb) == ""
    (kb / ".obsidian").unlink()
    (kb / ".obsidian").mkdir()
    (kb / ".obsidian" / "app.json").symlink_to(elsewhere / ".obsidian" / "app.json")
    assert vault.ignore_filters(kb) == []
    assert vault.ignore_filters(tmp_path / "missing") == []


DRAWING = note("---", "", "excalidraw-plugin: parsed", "tags: [excalidraw]", "", "---",
               "==⚠  Switch to EXCALIDRAW VIEW in the MORE OPTIONS menu of this document. ⚠== You can decompress",
               "", "", "# Excalidraw Data", "", "## Text Elements", "Kubernetes 集群 ^DGzeuBqP", "",
               "multi line", "text element ^m51KOC0v", "", "%%", "## Drawing", "```compressed-json",
               "N4KAkARALgngDgUwgLgAQQQDwMYEMA2AlgCYBOuA7hADTgQBuCpAzoQPYB2KqATL", "```", "%%")


def test_drawings_are_indexed_by_their_words_only():
    assert vault.is_drawing("Draws/白板.md", DRAWING)
    assert vault.is_drawing("Draws/plan.Excalidraw.md", "no front matter")
    assert not vault.is_drawing("notes/about excalidraw.md", note("---", "tags: [excalidraw]", "---"))
    words = vault.excalidraw_text(DRAWING)
    assert "N4KAk" not in words and "compressed-json" not in words and "^DGzeuBqP" not in words
    assert "Switch to EXCALIDRAW" not in words and "excalidraw-plugin: parsed" in words
    assert words.splitlines()[12:16] == ["Kubernetes 集群", "", "multi line", "text element"]
    assert len(words.splitlines()) == 17  # the lines kept keep their numbers
    old_format = ("# Text Elements\r\nidea ^abc\r\n# Embedded files\r\nabc: [[img.png]]\r\n"
                  "%%\r\n# Drawing\r\n```json\r\n{}")
    assert vault.excalidraw_text(old_format) == "# Text Elements\r\nidea\r\n# Embedded files\r\nabc: [[img.png]]\r\n"


@pytest.mark.parametrize("path, original", [
    ("notes/plan.sync-conflict-20240105-134512-ABCDEF7.md", "notes/plan.md"),  # Syncthing
    ("draw.excalidraw.sync-conflict-20231231-235959-Z2Y3X4W.md", "draw.excalidraw.md"),
    ("日记/2024-01-05 (Conflicted copy MacBook Pro 202401051345).md", "日记/2024-01-05.md"),  # Obsidian Sync
    ("Plan (conflicted copy 2024-01-05 134512).md", "Plan.md"),  # Nextcloud / ownCloud
    ("Plan (conflicted copy alice 2024-01-05 134512).md", "Plan.md"),
    ("work/Plan (Anna's conflicted copy 2024-01-05).md", "work/Plan.md"),  # Dropbox and its numbered copies
    ("Plan (Anna's MacBook's conflicted copy 2024-01-05 (1)).md", "Plan.md"),
    ("Plan (Anna’s conflicted copy 2024-01-05 2).md", "Plan.md"),
    ("secret_conflict-20240101-123456.md", "secret.md"),  # ownCloud, Nextcloud before 3.x
    ("secret (SFConflict bob@example.com 2024-01-01-12-00-00).md", "secret.md"),  # Seafile
    ("secret (SFConflict 2024-01-01-12-00-00).md", "secret.md"),
])
def test_sync_conflict_copies_name_their_original(path, original):
    assert vault.conflict_of(path) == original


@pytest.mark.parametrize("path", [
    "plan.md", "sync-conflict-resolution.md", "plan.sync-conflict.md", "plan.sync-conflict-2024-01-05.md",
    "plan.sync-conflict-20240105-134512-abcdef7.md", "Plan (conflicted copy).md",
    "Plan (Conflicted copy 202401051345).md", "Plan (conflicted copy 2024-01-05).md",
    "Anna's conflicted copy 2024-01-05.md", "Plan (Anna's conflicted copy).md", "How to fix a conflicted copy.md",
    "(conflicted copy 2024-01-05 134512).md", "Plan (conflicted copy 2024-01-05 134512)/inside.md",
    "my_conflict-notes.md", "Plan (SFConflict).md",
])
def test_names_that_merely_look_like_conflict_copies_are_notes(path):
    assert vault.conflict_of(path) is None


# --- Daily notes and templates ---

def test_daily_note_settings_and_path(tmp_path):
    assert vault.daily_note_settings(tmp_path) == {"folder": "", "format": "YYYY-MM-DD", "template": ""}
    write_settings(tmp_path, "daily-notes.json", {"folder": "/Journal/", "format": "YYYY/MM-MMMM/YYYY-MM-DD ddd",
                                                  "template": "Templates/Daily", "autorun": False})
    settings = vault.daily_note_settings(tmp_path)
    assert settings == {"folder": "Journal", "format": "YYYY/MM-MMMM/YYYY-MM-DD ddd", "template": "Templates/Daily"}
    assert vault.daily_note_path(settings, date(2024, 3, 9)) == "Journal/2024/03-March/2024-03-09 Sat.md"
    assert vault.daily_note_path({"folder": "", "format": ""}, date(2024, 3, 9)) == "2024-03-09.md"


@pytest.mark.parametrize("fmt, expected", [
    ("YYYY-MM-DD", "2021-01-03"), ("YY M D", "21 1 3"), ("dddd, MMMM Do", "Sunday, January 3rd"),
    ("ddd MMM", "Sun Jan"), ("HH:mm:ss", "00:05:09"), ("H h hh A a", "0 12 12 AM am"), ("Q", "1"),
    ("GGGG-[W]WW", "2020-W53"), ("W", "53"), ("[Week of] YYYY [at] HH", "Week of 2021 at 00"), ("DDDD", "003"),
    ("YYYY年M月D日", "2021年1月3日"),
])
def test_moment_format_tokens(fmt, expected):
    assert vault.moment_format(fmt, datetime(2021, 1, 3, 0, 5, 9)) == expected


def test_moment_format_hours_ordinals_and_dates():
    assert vault.moment_format("h:mm A, H", datetime(2024, 6, 30, 13, 7)) == "1:07 PM, 13"
    assert vault.moment_format("hh a", datetime(2024, 6, 30, 12, 0)) == "12 pm"
    assert [vault.moment_format("Do", date(2024, 5, d)) for d in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"]
    assert vault.moment_format("GGGG-WW Q", date(2024, 12, 30)) == "2025-01 4"


def test_fill_template():
    template = "# {{title}}\n创建于 {{date}} {{time}}\n{{date:dddd, MMMM Do YYYY}} / {{ TIME:HH[h]mm }}\n{{other}}\n"
    filled = vault.fill_template(template, "2024-03-09", datetime(2024, 3, 9, 8, 5))
    assert filled == "# 2024-03-09\n创建于 2024-03-09 08:05\nSaturday, March 9th 2024 / 08h05\n{{other}}\n"
    assert vault.fill_template("{{date}}", "x", date(2024, 3, 9), date_format="DD.MM.YYYY") == "09.03.2024"


# --- The vault's style ---

@pytest.mark.parametrize("app, expected", [
    ({}, ""),
    ({"promptDelete": False, "useMarkdownLinks": "yes"}, ""),
    ({"useMarkdownLinks": False}, "This vault links notes with [[wikilinks]] like [[Note]]."),
    ({"useMarkdownLinks": True, "newLinkFormat": "relative", "newFileLocation": "folder",
      "newFileFolderPath": "Inbox/"},
     "This vault links notes with Markdown links like [Note](Note.md), by paths relative to the linking note; "
     "new notes go in Inbox/."),
    ({"newFileLocation": "current", "newFileFolderPath": "Cards", "attachmentFolderPath": "Extras/Media",
      "newLinkFormat": "shortest"},
     "This vault links notes with [[wikilinks]] like [[Note]], by the shortest name that is unique; new notes go in "
     "the folder of the note they come from; attachments go in Extras/Media/."),
    ({"newFileLocation": "root", "attachmentFolderPath": "./assets"},
     "This vault links notes with [[wikilinks]] like [[Note]]; new notes go in the top folder; attachments go in "
     "assets/ beside their note."),
    ({"attachmentFolderPath": "./"}, "This vault links notes with [[wikilinks]] like [[Note]]; attachments go beside "
                                     "their note."),
    ({"attachmentFolderPath": "/"}, "This vault links notes with [[wikilinks]] like [[Note]]; attachments go in the "
                                    "top folder."),
])
def test_style_prompt(tmp_path, app, expected):
    write_settings(tmp_path, "app.json", app)
    assert vault.style_prompt(tmp_path) == expected


def test_no_obsidian_folder_means_no_style(tmp_path):
    assert vault.vault_style(tmp_path) == {} and vault.style_prompt(tmp_path) == ""


# --- A real vault ---



def test_every_front_matter_of_a_real_vault_parses_and_none_is_refused(garden):
    texts = {}
    for root, folders, files in os.walk(garden):
        folders[:] = [f for f in folders if not f.startswith(".")]
        for name in files:
            if name.endswith(".md"):
                path = Path(root, name)
                texts[path.relative_to(garden).as_posix()] = path.read_text(encoding="utf-8")
    assert len(texts) == 3176
    started = time.perf_counter()
    parsed = {path: (frontmatter.front_matter(text), vault.tags_of(text)) for path, text in texts.items()}
    elapsed_ms = (time.perf_counter() - started) * 1000
    opened = [path for path, text in texts.items() if text.startswith("---")]
    unread = [path for path in opened if parsed[path][0][1] == 1]  # closed: the body starts after it
    assert not unread, unread[:5]
    empty = [path for path in opened if not parsed[path][0][2]]  # `---` twice: templates
    assert all(parsed[path][0][0] for path in opened if path not in empty)
    refused = {path: problem for path in opened if (problem := frontmatter.front_matter_problem(texts[path]))}
    assert not refused, list(refused.items())[:5]
    tags = set().union(*(found for _, found in parsed.values()))
    aliases = sum(len(properties.get("aliases", [])) for (properties, _, _), _ in parsed.values())
    drawings = [path for path, text in texts.items() if vault.is_drawing(path, text)]
    conflicts = [path for path in texts if vault.conflict_of(path)]
    assert len(drawings) == 7 and not conflicts and "待办/今天" in tags
    assert all("N4KAk" not in vault.excalidraw_text(texts[path]) for path in drawings)
    print(f"\nknowledge-garden: {len(texts)} notes, {len(opened)} with front matter ({len(empty)} empty), "
          f"{len(tags)} distinct tags, "
          f"{aliases} aliases, {len(drawings)} excalidraw notes, {len(conflicts)} conflict copies; "
          f"front matter + tags of all notes in {elapsed_ms:.0f} ms")
    assert vault.style_prompt(garden).startswith("This vault links notes with [[wikilinks]]")
    assert vault.daily_note_settings(garden)["folder"] == "Spaces/0-Work/Daily notes"
