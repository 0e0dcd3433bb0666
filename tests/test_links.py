"""links.py: every link form Obsidian knows is found with its exact span, resolved as Obsidian resolves it, and
a move rewrites exactly the links it must, so that every link of the vault still means the file it meant."""

from pathlib import Path

import pytest

import links


def found(text: str, path: str = "note.md") -> list[tuple]:
    """(target, fragment, alias, embed, form) of each link, after checking each span holds what it says."""
    result = []
    for link in links.parse(text, path):
        assert text[link.path_start:link.path_end] == link.target or link.form == "canvas"
        assert link.start <= link.path_start <= link.path_end <= link.end
        result.append((link.target, link.fragment, link.alias, link.embed, link.form))
    return result


def move(files: dict, from_path: str, to_path: str, link_format: str = "shortest") -> tuple[dict, dict]:
    """The vault after the planned move, and the counts; fails if any link now means another file."""
    plan = links.plan_move(files, files, from_path, to_path, link_format)
    moved = {(to_path if p == from_path else p): text for p, text in files.items()}
    after = {p: plan.texts.get(p, text) for p, text in moved.items()}
    rename = {from_path: to_path}
    expected = {(rename.get(s, s), i): rename.get(t, t) for (s, i), t in links.resolve_all(files).items()}
    assert links.resolve_all(after) == expected
    for path, text in plan.texts.items():  # only link targets changed
        old, new = links.parse(moved[path], path), links.parse(text, path)
        assert len(old) == len(new) and _between(moved[path], old) == _between(text, new)
    return after, plan.counts


def _between(text: str, found: list) -> list[str]:
    """The text around the link targets."""
    ends = [0] + [x for link in found for x in (link.path_start, link.path_end)] + [len(text)]
    return [text[a:b] for a, b in zip(ends[::2], ends[1::2])]


# --- Finding links ---
def test_every_wikilink_form_is_found_with_its_parts():
    text = ("[[三体]] [[三体|书]] [[三体#人物]] [[三体#第一部#人物]] [[三体#^abc-1]] [[三体#人物|看人物]] [[#本页]]\n"
            "![[三体]] ![[图.png|300]] ![[书.pdf#page=3]] [[三体.md]] [[读书/三体]]\n"
            "| 书 | [[三体\\|刘慈欣]] |\n")
    assert found(text) == [
        ("三体", "", "", False, "wiki"), ("三体", "", "书", False, "wiki"), ("三体", "人物", "", False, "wiki"),
        ("三体", "第一部#人物", "", False, "wiki"), ("三体", "^abc-1", "", False, "wiki"),
        ("三体", "人物", "看人物", False, "wiki"), ("", "本页", "", False, "wiki"),
        ("三体", "", "", True, "wiki"), ("图.png", "", "300", True, "wiki"), ("书.pdf", "page=3", "", True, "wiki"),
        ("三体.md", "", "", False, "wiki"), ("读书/三体", "", "", False, "wiki"), ("三体", "", "刘慈欣", False, "wiki")]
    assert [link.line for link in links.parse(text, "n.md")] == [1] * 7 + [2] * 5 + [3]


def test_a_single_bracket_does_not_end_a_target_and_an_inner_link_wins():
    assert found("[[Sq]uare]] [[a [[Inner]] b]] \\[[escaped]] [[ ]]") == [
        ("Sq]uare", "", "", False, "wiki"), ("Inner", "", "", False, "wiki")]


def test_links_in_code_and_comments_are_text():
    text = ("`[[a]]` ``[[b` ]]`` [[one]]\n"
            "```python\n[[c]]\n```\n"
            "  - ```\n    [[d]]\n    ```\n"
            "~~~~\n[[e]]\n```\n[[f]]\n~~~~\n"
            "%%[[g]]%% [[two]] %%\n[[h]]\n[[i]]\n%%\n"
            "> ```\n> [[j]]\n> ```\n"
            "a ` lone backtick [[three]]\n\n"
            "```js `x`\n[[four]]\n"
            "%% unclosed\n[[k]]\n")
    assert [f[0] for f in found(text)] == ["one", "two", "three", "four"]


def test_an_unclosed_fence_hides_the_rest():
    assert found("[[a]]\n```\n[[b]]\n") == [("a", "", "", False, "wiki")]


def test_markdown_links_with_encoding_brackets_titles_and_images():
    text = ("[a](Three%20laws.md) [b](<Three laws.md#Heading> \"title\") ![c](img/a%20b.png) [d](三体.md#^x)\n"
            "[e](https://x.org/a.md) [f](mailto:a@b.c) [g](obsidian://open?x) [h](zotero://a) [i](#Local)\n"
            "[![j](pic.png)](Note.md) [k](Note(1).md) \\[l](no.md) [m]()\n")
    assert found(text) == [
        ("Three%20laws.md", "", "a", False, "markdown"), ("Three laws.md", "Heading", "b", False, "markdown"),
        ("img/a%20b.png", "", "c", True, "markdown"), ("三体.md", "^x", "d", False, "markdown"),
        ("", "Local", "i", False, "markdown"), ("Note.md", "", "![j](pic.png)", False, "markdown"),
        ("pic.png", "", "j", True, "markdown"), ("Note(1).md", "", "k", False, "markdown")]


def test_front_matter_links_count_only_when_quoted():
    text = ('---\nrelated: "[[A]]"\nup: [[NotALink]]\nlist:\n  - "[[B|b]]"\n  - \'[[C#h]]\'\n'
            'text: "see [[D]] too"\n---\n"[[E]]" in the body is a plain link\n')
    assert found(text) == [("A", "", "", False, "property"), ("B", "", "b", False, "property"),
                           ("C", "h", "", False, "property"), ("E", "", "", False, "wiki")]
    # front matter closed by "...", as frontmatter.py reads it: its link is a property's, rewritten as one on a move
    assert found('---\nup: "[[A]]"\n...\nbody [[B]]\n') == [("A", "", "", False, "property"),
                                                           ("B", "", "", False, "wiki")]


def test_canvas_nodes_name_files_and_other_files_hold_no_links():
    canvas = '{\n\t"nodes":[\n\t\t{"type":"file","file":"读书/三体.md","id":"1"},\n' \
             '\t\t{"type":"text","text":"\\"file\\": \\"no.md\\""},\n\t\t{"type":"file","file":"a\\/b.png"}\n\t]\n}'
    assert found(canvas, "board.canvas") == [("读书/三体.md", "", "", False, "canvas"),
                                             ("a/b.png", "", "", False, "canvas")]
    assert [link.line for link in links.parse(canvas, "board.canvas")] == [3, 5]
    assert links.parse("[[a]]", "notes.txt") == []


# --- Resolving links ---
VAULT = ["Note.md", "zzzz/Note.md", "a/b/Note.md", "a/x.md", "zzzz/deep/x.md", "b/Only.md", "b/Tie.md",
         "c/Tie.md", "Extras/图.png", "Log.md", "docs/My Note.md", "aliased.md", "a/b/Deep.md"]


@pytest.mark.parametrize("target, source, form, expected", [
    ("Note", "zzzz/x.md", "wiki", "Note.md"),  # an exact vault path wins, even over a note beside the source
    ("Only", "x.md", "wiki", "b/Only.md"),
    ("only.MD", "x.md", "wiki", "b/Only.md"),  # case-insensitive, .md optional
    ("LOG", "x.md", "wiki", "Log.md"),
    ("a/b/Note", "x.md", "wiki", "a/b/Note.md"),
    ("b/Note", "x.md", "wiki", "a/b/Note.md"),  # a path suffix
    ("Tie", "x.md", "wiki", "b/Tie.md"),  # equal lengths: alphabetical
    ("Tie", "c/y.md", "wiki", "c/Tie.md"),  # the note beside the source
    ("Deep", "zzzz/deep/x.md", "wiki", "a/b/Deep.md"),
    ("../Note", "zzzz/deep/y.md", "wiki", "zzzz/Note.md"),
    ("图.png", "x.md", "wiki", "Extras/图.png"),  # attachments are files too
    ("", "a/x.md", "wiki", "a/x.md"),  # [[#Heading]] is the note itself
    ("Missing", "x.md", "wiki", None),
    ("My%20Note.md", "docs/x.md", "markdown", "docs/My Note.md"),
    ("My%20Note.md", "x.md", "markdown", "docs/My Note.md"),  # then as a wikilink would
    ("b/Note.md", "a/x.md", "markdown", "a/b/Note.md"),  # from the note's folder first
    ("/Note.md", "a/x.md", "markdown", "Note.md"),
    ("b/Only.md", "a/x.md", "markdown", "b/Only.md"),  # then from the vault root
    ("Only.md", "x.canvas", "canvas", None),  # a canvas names vault paths only
    ("b/only.md", "x.canvas", "canvas", "b/Only.md"),
])
def test_resolution_follows_obsidian(target, source, form, expected):
    assert links.Resolver(VAULT).resolve(target, source, form) == expected


def test_shortest_path_string_wins_not_fewest_folders():
    assert links.Resolver(["zzzz/Note.md", "a/b/Note.md"]).resolve("Note", "x.md") == "a/b/Note.md"


def test_an_alias_never_resolves_a_link():
    files = {"real.md": "---\naliases:\n  - AI\n---\n", "x.md": "[[AI]] [[real|AI]]"}
    assert list(links.resolve_all(files).values()) == [None, "real.md"]


# --- Moving a note ---
def test_a_rename_rewrites_every_form_and_only_link_targets():
    files = {
        "读书/三体.md": "# 三体\n[[#人物]] [[三体#人物]] ![](封面.png) [[笔记]]\n",
        "读书/封面.png": None,
        "读书/笔记.md": "x",
        "日记/2024.md": ("---\nrelated: \"[[三体]]\"\n---\n读了 [[三体]]、[[三体|那本书]]、[[三体#人物|人物]]、"
                       "![[三体#^q1]]、[[读书/三体]]、[[三体.md]]。\n| 书 | [[三体\\|刘慈欣]] |\n"
                       "[看](../读书/三体.md) [看](<../读书/三体.md>) `[[三体]]` %%[[三体]]%% [[三体体]]\n"),
        "board.canvas": '{"nodes":[{"type":"file","file":"读书/三体.md"}]}',
        "其他.md": "[[别的]] 三体 unrelated\n",
    }
    after, counts = move(files, "读书/三体.md", "读书/三体-刘慈欣.md")
    assert after["日记/2024.md"] == (
        "---\nrelated: \"[[三体-刘慈欣]]\"\n---\n读了 [[三体-刘慈欣]]、[[三体-刘慈欣|那本书]]、[[三体-刘慈欣#人物|人物]]、"
        "![[三体-刘慈欣#^q1]]、[[三体-刘慈欣]]、[[三体-刘慈欣.md]]。\n| 书 | [[三体-刘慈欣\\|刘慈欣]] |\n"
        "[看](../读书/三体-刘慈欣.md) [看](<../读书/三体-刘慈欣.md>) `[[三体]]` %%[[三体]]%% [[三体体]]\n")
    assert after["读书/三体-刘慈欣.md"] == "# 三体\n[[#人物]] [[三体-刘慈欣#人物]] ![](封面.png) [[笔记]]\n"
    assert after["board.canvas"] == '{"nodes":[{"type":"file","file":"读书/三体-刘慈欣.md"}]}'
    assert counts == {"日记/2024.md": 10, "读书/三体-刘慈欣.md": 1, "board.canvas": 1}


def test_the_same_folder_rule_keeps_a_moved_note_linked():
    files = {"工作/笔记.md": "a", "其他/笔记.md": "b", "工作/x.md": "[[笔记]] and [[笔记#h|shown]]", "y.md": "[[笔记]]"}
    after, _ = move(files, "工作/笔记.md", "归档/笔记.md")
    assert after["工作/x.md"] == "[[归档/笔记]] and [[归档/笔记#h|shown]]"
    assert after["y.md"] == "[[笔记]]"  # it meant 其他/笔记.md and still does


def test_a_note_moving_in_does_not_steal_the_links_of_its_new_neighbours():
    files = {"其他/笔记.md": "b", "xyz/深处/笔记.md": "a", "工作/a.md": "[[笔记]] [[笔记.md]]",
             "工作/b.md": "[[xyz/深处/笔记]]"}
    after, counts = move(files, "xyz/深处/笔记.md", "工作/笔记.md")
    assert after["工作/a.md"] == "[[其他/笔记]] [[其他/笔记.md]]"  # else they would now mean the newcomer
    assert after["工作/b.md"] == "[[笔记]]"
    assert counts == {"工作/a.md": 2, "工作/b.md": 1}


def test_a_note_moving_to_a_shorter_path_does_not_steal_bare_links_vault_wide():
    files = {"long/folder/Note.md": "x", "deeper/still/Note.md": "y", "a.md": "[[Note]]", "b/c.md": "[[Note]]"}
    after, _ = move(files, "deeper/still/Note.md", "s/Note.md")
    assert after["a.md"] == after["b/c.md"] == "[[long/folder/Note]]"


def test_the_moved_notes_own_relative_links_follow_it_to_another_depth():
    files = {"aa/note.md": "![](img/p.png) [s](sibling.md) [r](../root.md) [[sibling]] [up](<../My Root.md>)",
             "aa/img/p.png": None, "aa/sibling.md": "", "root.md": "", "My Root.md": "", "b/sibling.md": ""}
    after, _ = move(files, "aa/note.md", "aa/deeper/still/note.md")
    assert after["aa/deeper/still/note.md"] == ("![](../../img/p.png) [s](../../sibling.md) [r](../../../root.md) "
                                               "[[aa/sibling]] [up](<../../../My Root.md>)")


def test_two_notes_of_one_name_and_case_differences():
    files = {"a/Plan.md": "", "b/plan.md": "", "x.md": "[[PLAN]] [[b/PLAN]]", "b/y.md": "[[plan]]"}
    after, _ = move(files, "b/plan.md", "c/plan.md")
    assert after["x.md"] == "[[PLAN]] [[c/plan]]"  # [[plan]] would mean a/Plan.md: the full path is needed
    assert after["b/y.md"] == "[[c/plan]]"
    after, _ = move(files, "a/Plan.md", "Plan.md")
    assert after["x.md"] == "[[PLAN]] [[b/PLAN]]"  # a root Plan.md now wins [[PLAN]], which meant it anyway


def test_names_with_spaces_and_percent_encoding_are_encoded_as_before():
    files = {"docs/My Note.md": "", "x/a.md": "[a](../docs/My%20Note.md) [b](<../docs/My Note.md>) [c](My%20Note.md)",
             "x/b.md": "[d](%E7%AC%94%E8%AE%B0.md) [e](笔记.md)", "x/笔记.md": ""}
    after, _ = move(files, "docs/My Note.md", "Archive/My New Note (2).md")
    assert after["x/a.md"] == ("[a](../Archive/My%20New%20Note%20%282%29.md) [b](<../Archive/My New Note (2).md>) "
                               "[c](My%20New%20Note%20%282%29.md)")
    after, _ = move(files, "x/笔记.md", "y/读书 笔记.md")
    assert after["x/b.md"] == "[d](../y/%E8%AF%BB%E4%B9%A6%20%E7%AC%94%E8%AE%B0.md) [e](../y/读书%20笔记.md)"


def test_md_extension_and_link_formats():
    files = {"a/Note.md": "", "a/b/x.md": "[[Note]] [[Note.md|n]] ![[a/Note.md]]", "Other.md": ""}
    for link_format, expected in [("shortest", "[[New]] [[New.md|n]] ![[New.md]]"),
                                  ("relative", "[[../../c/New]] [[../../c/New.md|n]] ![[../../c/New.md]]"),
                                  ("absolute", "[[c/New]] [[c/New.md|n]] ![[c/New.md]]")]:
        after, _ = move(files, "a/Note.md", "c/New.md", link_format)
        assert after["a/b/x.md"] == expected
    after, _ = move(files, "a/Note.md", "c/Note.md", "absolute")
    assert after["a/b/x.md"] == "[[Note]] [[Note.md|n]] ![[c/Note.md]]"  # links that still work are left as written


def test_moving_an_attachment_and_windows_line_endings():
    files = {"Extras/图.png": None, "x.md": "",
             "a/n.md": "---\r\nup: \"[[x]]\"\r\n---\r\n![[图.png|300]]\r\n![](../Extras/图.png)\r\n"}
    after, _ = move(files, "Extras/图.png", "Media/2024/图.png")
    assert after["a/n.md"] == "---\r\nup: \"[[x]]\"\r\n---\r\n![[图.png|300]]\r\n![](../Media/2024/图.png)\r\n"
    assert [link.line for link in links.parse(after["a/n.md"], "a/n.md")] == [2, 4, 5]


def test_unresolved_links_and_unrelated_files_are_left_alone():
    files = {"a.md": "[[missing]] [[a]]", "b.md": "[[c]]", "c.md": ""}
    plan = links.plan_move(files, files, "a.md", "z/a.md")
    assert plan.texts == {} and plan.counts == {}
    plan = links.plan_move(files, files, "a.md", "z/renamed.md")
    assert plan.texts == {"z/renamed.md": "[[missing]] [[renamed]]"}


def test_impossible_moves_say_why():
    files = {"a.md": "", "b.md": "[[a]]"}
    for to_path, message in [("b.md", "already exists"), ("c#1.md", "cannot be written")]:
        with pytest.raises(ValueError, match=message):
            links.plan_move(files, files, "a.md", to_path)
    with pytest.raises(ValueError, match="not in the vault"):
        links.plan_move(files, files, "zz.md", "y.md")
    with pytest.raises(ValueError, match="is needed"):
        links.plan_move(files, {"b.md": "[[a]]"}, "a.md", "c.md")
    assert links.plan_move({"a.md": ""}, {"a.md": ""}, "a.md", "c#1.md").texts == {}  # nothing to write


def test_rows_backlinks_and_the_texts_a_move_needs():
    files = {"读书/三体.md": "[[笔记]]", "读书/笔记.md": "", "其他/笔记.md": "", "a.md": "x\n[[三体]]\n[b](读书/三体.md)",
             "b.md": "[[other]]", "other.md": ""}
    stored = [row for path, text in files.items() for row in links.rows(text, path)]
    assert stored[1] == ("a.md", 2, "三体", "", "wiki", False, "三体")
    resolver = links.Resolver(files)
    keys = links.link_keys("读书/三体.md")
    assert links.backlinks("读书/三体.md", [r for r in stored if r[6] in keys], resolver) == ["a.md:2", "a.md:3"]
    assert links.outgoing([r for r in stored if r[0] == "a.md"], resolver) == [
        (2, "三体", "", "读书/三体.md"), (3, "读书/三体.md", "", "读书/三体.md")]
    keys = links.move_keys("读书/三体.md", "归档/三体.md")
    needed = {r[0] for r in stored if r[6] in keys} | {"读书/三体.md"}
    subset = links.plan_move(files, {p: files[p] for p in needed}, "读书/三体.md", "归档/三体.md")
    assert subset == links.plan_move(files, files, "读书/三体.md", "归档/三体.md")
    assert subset.texts == {"a.md": "x\n[[三体]]\n[b](归档/三体.md)", "归档/三体.md": "[[读书/笔记]]"}


def test_an_unknown_link_format_is_the_shortest():
    files = {"a.md": "[[读书/三体]]", "读书/三体.md": "x"}
    assert links.plan_move(files, files, "读书/三体.md", "归档/三体.md", "odd") == links.plan_move(
        files, files, "读书/三体.md", "归档/三体.md", "shortest")


# --- The real vault ---
def files_of(vault: Path) -> dict:
    """A vault's files by path, hidden ones left out: a note's or canvas's text, None for an attachment."""
    paths = (p.relative_to(vault) for p in vault.rglob("*") if p.is_file())
    return {path.as_posix(): (vault / path).read_text(encoding="utf-8", errors="replace")
            if path.suffix in (".md", ".canvas") else None
            for path in paths if not any(part.startswith(".") for part in path.parts)}


def test_renaming_the_real_vaults_most_linked_note_keeps_every_link(garden):
    files = files_of(garden)
    resolved = links.resolve_all(files)
    inbound = {}
    for (source, _), target in resolved.items():
        if target and target != source:
            inbound[target] = inbound.get(target, 0) + 1
    most = max(inbound, key=inbound.get)
    assert inbound[most] >= 100
    _, counts = move(files, most, most.rsplit("/", 1)[0] + "/renamed 笔记.md")
    assert sum(counts.values()) == inbound[most]
    _, counts = move(files, "Sources/Articles/常青笔记阅读笔记/常青笔记.md", "归档/常青笔记 v2.md", "relative")
    assert len(counts) > 40
