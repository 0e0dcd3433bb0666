"""Tests for vault.py: properties, tags, sections, excluded files, drawings, sync-conflict copies, daily notes
and the vault's style, on texts written as people write them in Obsidian vaults (CRLF, BOM, Chinese), and on a
real vault (knowledge-garden, skipped where /work/shared is absent)."""

import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
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
    properties, body_start, raw = vault.front_matter(text)
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
        return vault.front_matter(note("---", *lines, "---"))[0]

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
    properties, body_start, raw = vault.front_matter(text)
    assert properties == {"title": "计划", "tags": ["工作"]} and body_start == 5 and raw == ["title: 计划", "tags: [工作]"]


def test_no_front_matter_or_an_unclosed_one_gives_none():
    assert vault.front_matter("# Title\n\ntitle: x\n") == ({}, 1, [])
    assert vault.front_matter("---\ntitle: never closed\n\nbody\n") == ({}, 1, [])
    assert vault.front_matter(" ---\ntitle: x\n---\n") == ({}, 1, [])  # Obsidian wants '---' at the very start
    assert vault.front_matter("---\n---\nbody") == ({}, 3, [])


def test_unknown_shapes_never_crash():
    shapes = ["key: [unclosed", "key: [[a, b], c]", "key: {a: [1, 2]}", ": no key", "\tkey: tab", "key:value",
              "key: \"unclosed", "- orphan item", "? complex", "key: |+", "  only indented", "key: 'a' b",
              "key: \\u", 'key: "\\uZZZZ \\x4"', "&anchor: x", "key: *alias", "key: !!str 1", "…: ∞", "%YAML 1.2"]
    rng = random.Random(7)
    for _ in range(400):
        lines = rng.sample(shapes, rng.randint(1, 6))
        text = note("---", *lines, "---", "body #tag")
        properties, body_start, _ = vault.front_matter(text)
        assert isinstance(properties, dict) and body_start == len(lines) + 3
        problem = vault.front_matter_problem(text)
        assert problem is None or "\n" not in problem
    assert vault.front_matter(note("---", "key: [unclosed", "key2: {a: 1", "---"))[0] == {
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
    assert GOOD.count(old) == 1 and vault.front_matter_problem(GOOD) is None
    broken = GOOD.replace(old, new)
    problem = vault.front_matter_broken(GOOD, broken)
    assert problem and re.search(expected, problem), problem
    assert "\n" not in problem


def test_front_matter_that_yaml_accepts_is_not_refused():
    fine = note("---", "", "# comment", "title: 'a: b'", 'quote: "x" # note', "url: http://a.b/c?d=e#f",
                "time: 10:30 meeting", "it: it's fine", "related: \"[[X]]\"", "up: [[Home]]", "tpl: {{meta.author}}",
                "list: [a, \"b, c\", it's]", "cover: >-", "  https://x.y/z: still fine here", "nested:",
                "  child: a: b", "items:", "- a", "  continued", "- 'b: c'", "date created: 2022-08-05",
                "中文键: 值", "empty:", "...", "body: not front matter: at all")
    assert vault.front_matter_problem(fine) is None
    assert vault.front_matter_problem("# No front matter\n---\nnot: [yaml\n") is None
    assert vault.front_matter_problem("\ufeff---\r\ntitle: ok\r\n---\r\n") is None


def test_text_put_before_the_front_matter_is_refused_but_removing_it_is_not():
    moved = "# Plans\n\n" + GOOD
    assert "no longer start on line 1" in vault.front_matter_broken(GOOD, moved)
    assert "no longer start on line 1" in vault.front_matter_broken(GOOD.replace("\n", "\r\n"), "\r\n" + GOOD)
    assert vault.front_matter_broken(GOOD, GOOD.split("---\n", 2)[2]) is None  # the person asked to drop them
    assert vault.front_matter_broken(GOOD, GOOD.replace("work", "home")) is None
    assert vault.front_matter_broken("# Plain note\n", "intro\n# Plain note\n") is None
    assert vault.front_matter_broken("---\n---\nbody\n---\nmore\n", "body\n---\nmore\n") is None


def test_a_change_to_a_note_already_broken_is_not_refused():
    broken = GOOD.replace("title: Plans", "title: Re: Plans")
    assert vault.front_matter_problem(broken)
    assert vault.front_matter_broken(broken, broken + "more\n") is None
