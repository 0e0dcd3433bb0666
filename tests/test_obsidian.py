"""An Obsidian vault read and written the way its owner's Obsidian does, through the real tools and search:
aliases and tags as search fields, excluded files, drawings and sync-conflict copies kept out of the hits,
sections, front matter kept valid, daily notes from their template, and the vault's style in the system prompt.

Real files in tmp_path; the knowledge-garden vault (/work/shared/corpus) where it exists, else those tests skip.
"""

import json
import re
import sys
import tarfile
from datetime import date, datetime
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import index  # noqa: E402
import search  # noqa: E402
import tools  # noqa: E402
import vault  # noqa: E402
from conftest import make_settings  # noqa: E402

GARDEN = Path("/work/shared/corpus/knowledge-garden.tar.gz")


@pytest.fixture(autouse=True)
def cold(notices):
    index.close_index()
    yield
    index.close_index()


def write(kb: Path, rel: str, text: str) -> Path:
    path = kb / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def hits(output: str) -> list:
    return re.findall(r"^(\S.*?) — ", output, re.M)


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
    return lambda kb, query, folder=None, watch=True: search.search_notes(kb, tmp_path / "index", query, folder, watch)


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
    row = index._row(kb.resolve(), "a.md", None)
    assert "Intro words." in row[-2] and "status" not in row[-2]  # the lead: the body's first paragraph


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
           "OPTIONS menu of this document. ⚠==\n\n\n# Text Elements\nDeploy pipeline ^abc123\n\n%%\n# Drawing\n```json\n"
           + json.dumps({"type": "excalidraw", "elements": [{"type": "rectangle", "strokeColor": "#1e1e1e"}]}) + "\n```\n%%\n")


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
    assert "Templates" not in search.list_notes(kb, tmp_path / "index")


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
    assert len(lines) == 1 and lines[0].startswith("work/Plan.md has 3 sync-conflict copies: Plan (Bob's")
    listed = search.list_notes(kb, tmp_path / "index")
    assert "work/Plan.sync-conflict-20240105-101010-ABCDEF1.md — Plan" in listed
    marked = [line for line in listed.splitlines() if "[sync-conflict copy of" in line]
    assert len(marked) == 4 and "4 sync-conflict copies" in listed
