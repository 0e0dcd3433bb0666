"""An Obsidian vault read and written the way its owner's Obsidian does, through the real tools and search:
aliases and tags as search fields, excluded files, drawings and sync-conflict copies kept out of the hits,
sections, front matter kept valid, daily notes from their template, and the vault's style in the system prompt.

Real files in tmp_path; the knowledge-garden vault (conftest.GARDEN) where it exists, else those tests skip.
"""

import json
import sys
from datetime import date, datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import changing  # noqa: E402
import index  # noqa: E402
import reading  # noqa: E402
import search  # noqa: E402
import tools  # noqa: E402
import vault  # noqa: E402
from conftest import hits, make_notebook, write  # noqa: E402



@pytest.fixture
def vault_kb(tmp_path) -> Path:
    kb = tmp_path / "vault"
    write(kb, "Kubernetes.md", "---\naliases: [k8s, kube]\ntags: [devops/scheduling]\n---\n# Kubernetes\n\n"
                               "Schedules containers.\n")
    write(kb, "ops/cluster log.md", "# Cluster log\n\nk8s upgrade; k8s nodes drained; k8s again and k8s.\n")
    write(kb, "ops/k8s-tips.md", "# Tips\n\nk8s k8s k8s: use kubectl.\n")
    write(kb, "三体.md", "---\ntitle: 三体\naliases:\n  - 三体问题\n---\n刘慈欣的小说。\n")
    write(kb, "物理.md", "# 物理\n\n三体问题没有解析解。三体问题是混沌的。三体问题很难。\n")
    return kb.resolve()


@pytest.fixture
def find(tmp_path):
    """search_notes with the test's Notebook of each notes folder (with inotify, or without)."""
    made = {}

    def find(kb, query, folder=None, watch=True):
        if (kb, watch) not in made:
            made[kb, watch] = make_notebook(kb, index_dir=tmp_path / "index", search_watch=watch)
        return search.search_notes(made[kb, watch], query, folder)
    return find


# --- Aliases, titles and tags are search fields ---

def test_a_query_that_is_an_alias_ranks_its_note_first(vault_kb, find):
    assert hits(find(vault_kb, "k8s"))[0] == "Kubernetes.md"
    assert hits(find(vault_kb, "K8S"))[0] == "Kubernetes.md"
    assert hits(find(vault_kb, "三体问题"))[0] == "三体.md"
    assert hits(find(vault_kb, "kube")) == ["Kubernetes.md"]  # an alias is found even where the text never says it


def test_the_title_comes_from_front_matter_and_the_lead_starts_after_it(tmp_path, find):
    kb = tmp_path / "notes"
    write(kb, "a.md", "---\n# a comment in the YAML\ntitle: \"Re: the plan\"\nstatus: draft\n---\n\nIntro words.\n")
    write(kb, "b.md", "---\n# not a heading\nstatus: draft\n---\n## Real heading\n\nBody.\n")
    out = find(kb.resolve(), "draft")
    assert "a.md — Re: the plan" in out and "b.md — Real heading" in out
    _, searched, _ = index._row(kb.resolve(), "a.md", None, [])
    assert "Intro words." in searched.lead and "status" not in searched.lead  # the body's first paragraph


def test_tag_search_finds_exactly_the_tagged_notes_nested_tags_included(tmp_path, find):
    kb = tmp_path / "notes"
    write(kb, "k.md", "---\ntags: [devops/scheduling]\n---\nPods.\n")
    write(kb, "ci.md", "# CI\n\nPipelines #DevOps and more.\n")
    write(kb, "other.md", "# Other\n\nAbout devops, but #devopsy is another tag.\n")
    write(kb, "code.md", "# Code\n\n```\n#devops in code is no tag\n```\n`#devops` neither\n")
    write(kb, "list.md", "---\ntags:\n  - reading\n---\nBooks.\n")
    kb = kb.resolve()
    out = find(kb, "tag:devops")
    assert sorted(hits(out)) == ["ci.md", "k.md"] and out.startswith("2 notes match")
    assert sorted(hits(find(kb, "#devops"))) == ["ci.md", "k.md"]
    assert hits(find(kb, "tag:devops/scheduling")) == ["k.md"]
    assert hits(find(kb, "tag:DEVOPS pipelines")) == ["ci.md"]  # a tag and words: both
    assert hits(find(kb, "tag:reading")) == ["list.md"]
    assert "No notes" in find(kb, "tag:devop")


# --- What the owner excluded, drawings and sync-conflict copies are no hits ---

DRAWING = ("---\n\nexcalidraw-plugin: parsed\ntags: [excalidraw]\n\n---\n==⚠  Switch to EXCALIDRAW VIEW in the MORE "
           "OPTIONS menu of this document. ⚠==\n\n\n# Text Elements\nDeploy pipeline ^abc123\n\n%%\n# Drawing\n"
           "```json\n" + json.dumps({"elements": [{"type": "rectangle", "strokeColor": "#1e1e1e"}]}) + "\n```\n%%\n")


def test_excluded_files_dot_folders_and_drawing_data_are_never_hits(tmp_path, find):
    kb = tmp_path / "notes"
    write(kb, ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Templates/", "/secret/"]}))
    write(kb, "Templates/daily.md", "# Daily zebra template\n")
    write(kb, "work/secret plans.md", "# Zebra plans\n")
    write(kb, ".trash/old.md", "# Old zebra\n")
    write(kb, "zoo.md", "# Zoo\n\nA zebra.\n")
    write(kb, "Draws/deploy.excalidraw.md", DRAWING)
    kb = kb.resolve()
    assert hits(find(kb, "zebra")) == ["zoo.md"]
    assert "No notes" in find(kb, "strokeColor") and "No notes" in find(kb, "rectangle")
    assert "No notes" in find(kb, "switch view options menu")
    assert hits(find(kb, "deploy pipeline")) == ["Draws/deploy.excalidraw.md"]
    assert "Templates" not in search.list_notes(make_notebook(kb, index_dir=tmp_path / "index"))


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "stat"])
def test_a_change_to_the_excluded_files_counts_from_the_next_search(tmp_path, find, watch):
    kb = tmp_path / "notes"
    write(kb, "Archive/old.md", "# Old zebra\n")
    write(kb, "zoo.md", "# Zoo zebra\n")
    kb = kb.resolve()
    assert sorted(hits(find(kb, "zebra", watch=watch))) == ["Archive/old.md", "zoo.md"]
    write(kb, ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archive/"]}))
    assert hits(find(kb, "zebra", watch=watch)) == ["zoo.md"]
    write(kb, "Archive/new.md", "# New zebra\n")  # a note added there stays out too
    assert hits(find(kb, "zebra", watch=watch)) == ["zoo.md"]
    write(kb, ".obsidian/app.json", json.dumps({"userIgnoreFilters": []}))
    assert sorted(hits(find(kb, "zebra", watch=watch))) == ["Archive/new.md", "Archive/old.md", "zoo.md"]


def test_sync_conflict_copies_are_named_by_their_note_not_shown_as_hits(tmp_path, find):
    kb = tmp_path / "notes"
    plan = "# Plan\n\nShip the zeppelin in May.\n"
    write(kb, "work/Plan.md", plan)
    write(kb, "work/Plan.sync-conflict-20240105-101010-ABCDEF1.md", plan + "Local edit.\n")
    write(kb, "work/Plan (Conflicted copy laptop 202401051010).md", plan)
    write(kb, "work/Plan (Bob's conflicted copy 2024-01-05).md", plan)
    write(kb, "Orphan.sync-conflict-20240105-101010-ABCDEF1.md", "# Orphan\n\nA zeppelin.\n")  # its note is gone
    kb = kb.resolve()
    out = find(kb, "zeppelin")
    assert sorted(hits(out)) == ["Orphan.sync-conflict-20240105-101010-ABCDEF1.md", "work/Plan.md"]
    assert out.startswith("2 notes match")
    lines = [line.strip() for line in out.splitlines() if "sync-conflict cop" in line]
    assert len(lines) == 1 and lines[0].startswith("Plan.md has 3 sync-conflict copies: Plan (Bob's")
    listed = search.list_notes(make_notebook(kb, index_dir=tmp_path / "index"))
    assert "work/Plan.sync-conflict-20240105-101010-ABCDEF1.md — Plan" in listed
    marked = [line for line in listed.splitlines() if "[sync-conflict copy of" in line]
    assert len(marked) == 4 and "4 sync-conflict copies" in listed


# --- Sections and outlines ---

def run(notebook, name, ask=None, **args):
    return tools.execute_tool(name, json.dumps(args), notebook, ask).text


GUIDE = ("---\ntags: [guide]\n---\n# Guide\n\nIntro.\n\n## Setup\n\nGeneral setup.\n\n### Linux\n\napt install x\n\n"
         "### **macOS**\n\nbrew install x\n\n## Usage\n\nRun `x`.\n\n## Linux\n\nWhy Linux.\n")


def test_a_read_in_the_wrong_folder_reads_the_one_note_of_that_name(notebook, kb):
    """Qwen2.5-Coder-1.5B, shown "Cards/永久笔记/ACCESS 笔记组织法.md" in the passages, read
    "Calendar/ACCESS 笔记组织法.md", was told there is no such note, and gave up. A link would find the note by its
    name anywhere; so does read_note, saying so. Two of that name are named; a private one never is."""
    write(kb, "Cards/永久笔记/ACCESS 笔记组织法.md", "# ACCESS\n\n- Inbox，原名 Encounters\n")
    result = tools.execute_tool("read_note", {"file_path": "Calendar/access 笔记组织法.md"}, notebook)
    assert result.text.startswith("No note is at Calendar/access 笔记组织法.md; the one note of that name is "
                                  "Cards/永久笔记/ACCESS 笔记组织法.md:\nCards/永久笔记/ACCESS 笔记组织法.md (lines 1-3")
    assert "原名 Encounters" in result.text and result.shown["lines"] == {"Cards/永久笔记/ACCESS 笔记组织法.md": [1, 2, 3]}
    write(kb, "a/plan.md", "A.\n")
    write(kb, "b/Plan.md", "B.\n")
    write(kb, "c/salary.md", "---\nprivate: true\n---\nsecret\n")
    out = run(notebook, "read_note", file_path="plan.md")
    assert out == f"{tools.ERROR}no such note. Notes of that name: a/plan.md, b/Plan.md."
    for hidden in ("salary.md", "c/salary.md"):  # one of that name is private: no such note, as for any
        assert run(notebook, "read_note", file_path=hidden).endswith("Use search_notes or list_notes to find the "
                                                                     "right path.")


def test_a_read_from_the_middle_of_a_note_says_the_headings_it_is_under(notebook, kb):
    """Qwen2.5-Coder-1.5B read the FAST note from the line after "## Slice" and said the S stands for "splitting"."""
    write(kb, "guide.md", GUIDE)
    result = tools.execute_tool("read_note", json.dumps({"file_path": "guide.md", "start_line": 18}), notebook)
    assert result.text.startswith('guide.md (lines 18-26 of 26; under "Guide" (line 4) > "Setup" (line 8) > '
                                  '"**macOS**" (line 16))\nbrew install x\n')
    assert {4, 8, 16} <= set(result.shown["lines"]["guide.md"])  # the headings named are shown: citable
    assert "under" not in run(notebook, "read_note", file_path="guide.md", start_line=4)  # a heading's own line


def test_read_note_returns_one_section_with_its_line_numbers(notebook, kb):
    write(kb, "guide.md", GUIDE)
    out = run(notebook, "read_note", file_path="guide.md", section="setup")
    assert out.startswith('guide.md (lines 8-19 of 26; section "setup" ends at line 19)\n## Setup\n')
    assert "brew install x" in out and "Run `x`" not in out
    assert "brew install" in run(notebook, "read_note", file_path="guide.md", section="## macos")  # marks ignored
    assert run(notebook, "read_note", file_path="guide.md", section="") == run(notebook, "read_note",
                                                                                file_path="guide.md")  # a small model's
    out = run(notebook, "read_note", file_path="guide.md", section="Setup > Linux")
    assert "(lines 12-15 of 26;" in out and "apt install x" in out and "Why Linux" not in out
    out = run(notebook, "read_note", file_path="guide.md", section="linux")
    assert "2 headings match 'linux': Guide > Setup > Linux (line 12); Guide > Linux (line 24)" in out
    out = run(notebook, "read_note", file_path="guide.md", section="Install")
    assert out.startswith(tools.ERROR) and "no heading 'Install'" in out and "Usage (line 20)" in out


def test_a_long_notes_first_read_starts_with_its_outline_and_sections_page_on(notebook, kb):
    body = "".join(f"## Part {n}\n\n" + "".join(f"words of part {n}, line {i}\n" for i in range(60)) for n in range(8))
    write(kb, "long.md", "# Long\n\n" + body)
    first = run(notebook, "read_note", file_path="long.md")
    assert first.startswith("long.md has 498 lines. Its headings, with the line each starts on:\nLong (line 1)\n"
                            "  Part 0 (line 3)\n") and "  Part 7 (line 437)\n" in first
    assert "long.md (lines 1-" in first and "call read_note with start_line=" in first
    assert len(first) <= reading.MAX_TOOL_OUTPUT and "[… cut:" in first.splitlines()[-1]
    assert "Its headings" not in run(notebook, "read_note", file_path="long.md", start_line=100)
    part = run(notebook, "read_note", file_path="long.md", section="Part 7")
    assert part.startswith('long.md (lines 437-498 of 498; section "Part 7" ends at line 498)')
    assert "Its headings" not in run(notebook, "read_note", file_path="vim.md")  # a short note: just the note


def test_append_to_a_section_lands_at_its_end_and_an_unknown_one_writes_nothing(notebook, kb):
    write(kb, "guide.md", GUIDE)
    out = run(notebook, "append_note", file_path="guide.md", content="- also: pipx", section="Setup > macOS")
    assert 'Appended to the end of the section "Setup > macOS" of guide.md' in out
    text = (kb / "guide.md").read_text(encoding="utf-8")
    assert "brew install x\n- also: pipx\n\n## Usage" in text
    out = run(notebook, "append_note", file_path="guide.md", content="- lost?", section="Install")
    assert out.startswith(tools.ERROR) and "no heading 'Install'" in out and "Nothing was written" in out
    assert "Setup (line 8)" in out
    assert (kb / "guide.md").read_text(encoding="utf-8") == text and "## Install" not in text


def test_a_person_reads_a_section_with_read_path_hash_heading(call_main, kb):
    write(kb, "guide.md", GUIDE)
    write(kb, "C#.md", "# C#\n\nA language.\n")
    result = call_main(kb=kb, key=None, stdin="/read guide.md#Setup > macOS\n/read C#.md\n/read guide.md#Install\n"
                                               "/read guide.md#Setup#macOS\n")  # the second: as a link writes it
    assert 'guide.md (lines 16-19 of 26; section "Setup > macOS" ends at line 19)\n### **macOS**' in result.stdout
    assert 'guide.md (lines 16-19 of 26; section "Setup#macOS" ends at line 19)\n### **macOS**' in result.stdout
    assert "brew install x" in result.stdout and "## Usage" not in result.stdout
    assert "C#.md (lines 1-3 of 3)" in result.stdout
    assert "no heading 'Install' in the note. Its headings: Guide (line 4); Setup (line 8)" in result.stderr


# --- Front matter stays valid ---

@pytest.mark.parametrize("tool, args", [
    ("edit_note", {"old_text": "status: draft", "new_text": "status: draft: maybe"}),
    ("edit_note", {"old_text": "---\n# Plan", "new_text": "# Plan"}),  # the closing fence gone
    ("write_note", {"content": "---\ntitle: x\nnot a property\n---\nbody\n", "overwrite": True}),
    ("edit_note", {"old_text": "---\ntags", "new_text": "Intro\n---\ntags"}),  # text put before it
])
def test_a_change_that_would_break_the_front_matter_is_refused_and_nothing_written(notebook, kb, tool, args):
    note = "---\ntags: [plan]\nstatus: draft\n---\n# Plan\n\nSteps.\n"
    write(kb, "plan.md", note)
    out = run(notebook, tool, file_path="plan.md", **args)
    assert out.startswith(tools.ERROR) and "would break the front matter" in out and "Nothing was written" in out
    assert (kb / "plan.md").read_text(encoding="utf-8") == note
    assert not list(kb.glob(".history/plan.md.*"))


def test_writing_a_new_note_with_broken_front_matter_is_refused_and_a_valid_one_is_kept(notebook, kb):
    out = run(notebook, "write_note", file_path="new.md", content="---\ntitle: \"unclosed\n---\nBody\n")
    assert out.startswith(tools.ERROR) and "quote is never closed" in out and not (kb / "new.md").exists()
    good = "---\ntitle: Fine\ntags:\n  - a\n---\nBody\n"
    assert run(notebook, "write_note", file_path="new.md", content=good).startswith("+ new.md")
    assert run(notebook, "edit_note", file_path="new.md", old_text="  - a", new_text="  - a\n  - b").startswith("~")


# --- Daily notes and the vault's style ---

class March5(datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(2024, 3, 5, 9, 30)


@pytest.fixture
def daily_kb(kb, monkeypatch):
    write(kb, ".obsidian/daily-notes.json", json.dumps({"folder": "Journal/", "format": "YYYY/MM/YYYY-MM-DD",
                                                         "template": "Templates/Daily"}))
    write(kb, ".obsidian/app.json", json.dumps({"useMarkdownLinks": True, "newFileLocation": "folder",
                                                "newFileFolderPath": "Inbox"}))
    write(kb, "Templates/Daily.md", "---\ncreated: {{date}} {{time}}\n---\n# {{title}} ({{date:dddd}})\n\n## Log\n\n"
                                    "## Tasks\n- [ ] review\n")
    monkeypatch.setattr(changing, "datetime", March5)
    return kb


def test_add_to_todays_log_creates_the_daily_note_from_its_template_in_one_call(notebook, daily_kb):
    """{{date}} takes the daily note's own format, as Obsidian fills it."""
    out = run(notebook, "append_note", file_path="Journal/2024/03/2024-03-05.md", content="met Bob", section="Log")
    assert out.startswith("+ Journal/2024/03/2024-03-05.md") and "from the template Templates/Daily.md" in out
    assert (daily_kb / "Journal/2024/03/2024-03-05.md").read_text(encoding="utf-8") == (
        "---\ncreated: 2024/03/2024-03-05 09:30\n---\n# 2024-03-05 (Tuesday)\n\n## Log\nmet Bob\n\n"
        "## Tasks\n- [ ] review\n")
    run(notebook, "append_note", file_path="Journal/2024/03/2024-03-05.md", content="lunch", section="Log")
    assert "## Log\nmet Bob\nlunch\n\n## Tasks" in (daily_kb / "Journal/2024/03/2024-03-05.md").read_text("utf-8")


def test_only_todays_daily_note_starts_from_the_template(notebook, daily_kb):
    run(notebook, "write_note", file_path="Journal/2024/03/2024-03-04.md", content="Yesterday.\n")
    assert (daily_kb / "Journal/2024/03/2024-03-04.md").read_text(encoding="utf-8") == "Yesterday.\n"
    out = run(notebook, "write_note", file_path="Journal/2024/03/2024-03-05.md", content="Plan the week.\n")
    assert "from the template Templates/Daily.md, with the content after it" in out
    assert (daily_kb / "Journal/2024/03/2024-03-05.md").read_text(encoding="utf-8").endswith("- [ ] review\nPlan the "
                                                                                          "week.\n")
    out = run(notebook, "append_note", file_path="notes.md", content="x", section="Log")  # a new plain note: no heading
    assert out.startswith(tools.ERROR) and not (daily_kb / "notes.md").exists()


def test_the_system_prompt_names_todays_daily_note_and_the_vaults_style_and_stays_the_same_all_day(daily_kb):
    about = vault.vault_prompt(daily_kb, date(2024, 3, 5))
    assert "Today's daily note is Journal/2024/03/2024-03-05.md" in about
    assert "Markdown links like [Note](Note.md)" in about and "new notes go in Inbox/" in about
    import model
    first = model.system_message(daily_kb)["content"]
    assert "Today's daily note is Journal/" in first and "Markdown links" in first
    write(daily_kb, ".obsidian/app.json", json.dumps({"useMarkdownLinks": False}))
    assert model.system_message(daily_kb)["content"] == first  # byte-stable within the day (prompt caching)
    assert "daily note" not in model.system_message(daily_kb.parent)["content"]  # no vault notebook: nothing added


# --- A real vault ---



def test_the_knowledge_garden_searched_by_alias_and_tag_without_drawing_data(garden, tmp_path):
    notebook = make_notebook(garden, index_dir=tmp_path / "index")
    find = lambda query: search.search_notes(notebook, query)  # noqa: E731
    assert hits(find("k8s"))[0] == "Spaces/2-Area/云计算与云原生/Kubernetes.md"  # `aliases: k8s`
    assert hits(find("收藏家谬误"))[0].endswith("/收藏者谬误.md")
    tagged = [path for path, _ in index._walk(garden, [], [])[0].items()
              if any(tag == "待办" or tag.startswith("待办/") for tag in vault.tags_of(index.read_text(garden, path)))]
    out = find("tag:待办")
    assert out.startswith(f"{len(tagged)} notes match") and set(hits(out)) <= set(tagged) and len(tagged) > 50
    assert "No notes" in find("N4KAkARALgngDgUwgLgAQQQDwMYEMA2AlgCYBOuA7hADTgQBuCpAzoQPYB2KqATL")  # a drawing's data
    shown = hits(find("switch to view in the more options menu"))  # the plugin's notice line in every drawing
    assert shown and not [path for path in shown if vault.is_drawing(path, index.read_text(garden, path))]
