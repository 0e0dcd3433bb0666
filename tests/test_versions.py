"""notes.py on real files: faithful formats, atomic writes that fail cleanly, pruning, undo of every op."""

import json
import codecs
import os
from datetime import datetime, timedelta, timezone

import pytest

import diffs
import notes
import versions
from notes import ToolError as VersionError
from diffs import change_summary


def save_note(kb, rel_path, new_text, op):
    """A text change planned and applied at once (planned again under the lock if the note changed): its summary."""
    def plan():
        return versions.plan_text(kb, rel_path, new_text, op)
    return summary_of(versions.apply(kb, plan(), replan=plan))


def move_note(kb, from_path, to_path):
    return summary_of(versions.apply(kb, versions.plan_move(kb, from_path, to_path)))


def delete_note(kb, rel_path):
    return summary_of(versions.apply(kb, versions.plan_delete(kb, rel_path)))


def summary_of(applied):
    change, warning = applied
    return diffs.summary(change) + warning


def undo_last(kb):
    try:
        return versions.undo_last(kb)[0]
    except VersionError as exc:
        return f"Error: {exc}"

BOM = codecs.BOM_UTF8


def make(kb, rel, data: bytes):
    path = kb / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def read_note(path):
    return notes.decode_note(path.read_bytes())


def history_files(kb, rel):
    return versions.list_versions(kb, rel)


def stray_files(folder):
    """Temp files left anywhere under folder."""
    return [p for p in folder.rglob("*") if p.name.startswith(".~") or p.suffix == ".tmp"]


# --- formats ---


def test_crlf_note_stays_crlf_and_untouched_lines_stay_byte_identical(tmp_path):
    original = b"# Git\r\n\r\ngit comit -m msg\r\nline four\r\n"
    path = make(tmp_path, "git.md", original)
    text, fmt = read_note(path)
    assert text == "# Git\n\ngit comit -m msg\nline four\n"
    assert fmt.newline == "\r\n" and not fmt.bom
    save_note(tmp_path, "git.md", text.replace("comit", "commit"), "edit")
    assert path.read_bytes() == original.replace(b"comit", b"commit")


def test_bom_and_chinese_survive_a_round_trip(tmp_path):
    original = BOM + "# 笔记\r\n编辑 note\r\n".encode()
    path = make(tmp_path, "zh.md", original)
    text, fmt = read_note(path)
    assert text == "# 笔记\n编辑 note\n" and fmt.bom
    save_note(tmp_path, "zh.md", text + "新的一行\n", "append")
    assert path.read_bytes() == original + "新的一行\r\n".encode()


def test_lf_note_without_bom_gets_no_bom_and_no_cr(tmp_path):
    path = make(tmp_path, "a.md", b"one\ntwo\n")
    save_note(tmp_path, "a.md", "one\n2\n", "edit")
    assert path.read_bytes() == b"one\n2\n"


def test_mixed_line_endings_and_stray_cr_are_kept_exactly(tmp_path):
    for name, data in [("mixed.md", b"a\r\nb\nc\r\n"), ("cr.md", b"x\r\r\ny\r\n")]:
        path = make(tmp_path, name, data)
        text, fmt = read_note(path)
        save_note(tmp_path, name, text + "end", "append")
        assert path.read_bytes() == data + b"end"


def test_non_utf8_note_is_refused_and_left_alone(tmp_path):
    path = make(tmp_path, "latin.txt", "café".encode("latin-1"))
    with pytest.raises(VersionError, match="not UTF-8"):
        read_note(path)
    with pytest.raises(VersionError, match="not UTF-8"):
        save_note(tmp_path, "latin.txt", "new", "overwrite")
    assert path.read_bytes() == "café".encode("latin-1")


# --- atomic writes ---


@pytest.mark.parametrize("broken", ["replace", "fsync", "chmod"])
def test_failed_write_leaves_old_note_and_no_temp_file(tmp_path, monkeypatch, broken):
    path = make(tmp_path, "n.md", b"precious words\n")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, broken, disk_full)
    with pytest.raises(OSError):
        notes.write_bytes(tmp_path, "n.md", b"garbage")
    monkeypatch.undo()
    assert path.read_bytes() == b"precious words\n"
    assert stray_files(tmp_path) == []


def disk_full_for(monkeypatch, name: str) -> None:
    """Replacing a file called `name` fails as on a full disk; other writes (the .history copy) go through."""
    real_replace = os.replace

    def replace(src, dst, **folders):
        if dst == name:
            raise OSError(28, "No space left on device")
        real_replace(src, dst, **folders)

    monkeypatch.setattr(os, "replace", replace)


def test_failed_save_says_so_and_records_nothing(tmp_path, monkeypatch):
    path = make(tmp_path, "notes/n.md", b"precious words\n")
    disk_full_for(monkeypatch, "n.md")
    with pytest.raises(VersionError, match="No space left on device; the note is as it was"):
        save_note(tmp_path, "notes/n.md", "garbage", "overwrite")
    monkeypatch.undo()
    assert path.read_bytes() == b"precious words\n"
    assert stray_files(tmp_path) == []
    assert versions.read_log(tmp_path) == []  # a failed change is nothing to undo


def test_interrupt_during_write_cleans_up_too(tmp_path, monkeypatch):
    path = make(tmp_path, "n.md", b"old\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        notes.write_bytes(tmp_path, "n.md", b"new\n")
    assert path.read_bytes() == b"old\n"
    assert stray_files(tmp_path) == []


def test_write_keeps_file_permissions_and_symlinks(tmp_path):
    real = make(tmp_path, "real.md", b"x\n")
    os.chmod(real, 0o640)
    (tmp_path / "link.md").symlink_to(real)
    resolved = notes.rel(tmp_path, notes.safe_path(tmp_path, "link.md"))  # the guard follows a link inside
    save_note(tmp_path, resolved, "y\n", "overwrite")
    assert (tmp_path / "link.md").is_symlink()
    assert real.read_bytes() == b"y\n"
    assert real.stat().st_mode & 0o777 == 0o640


# --- creating, replacing, refusing ---


def test_write_creates_folders_and_never_replaces_an_existing_note(tmp_path):
    assert save_note(tmp_path, "new/deep/n.md", "a\nb\n", "write") == "+ new/deep/n.md  +2"
    assert (tmp_path / "new/deep/n.md").read_bytes() == b"a\nb\n"
    with pytest.raises(VersionError, match="already exists"):
        save_note(tmp_path, "new/deep/n.md", "other", "write")
    assert (tmp_path / "new/deep/n.md").read_text() == "a\nb\n"


def test_create_loses_a_race_without_replacing(tmp_path, monkeypatch):
    # The person saves a note of the same name between our check and our write.
    real_put = notes._put

    def person_saves_first(src_folder, src, dst_folder, dst, replace):
        (tmp_path / dst).write_bytes(b"typed by the person")
        real_put(src_folder, src, dst_folder, dst, replace)

    monkeypatch.setattr(notes, "_put", person_saves_first)
    with pytest.raises(VersionError, match="already exists"):
        save_note(tmp_path, "n.md", "agent", "write")
    assert (tmp_path / "n.md").read_bytes() == b"typed by the person"
    assert stray_files(tmp_path) == []


def test_overwrite_keeps_previous_version_in_history(tmp_path):
    make(tmp_path, "notes/a.md", b"years of writing\n")
    summary = save_note(tmp_path, "notes/a.md", "short\n", "overwrite")
    assert summary == "~ notes/a.md  +1 \u22121"
    [kept] = history_files(tmp_path, "notes/a.md")
    assert kept.read_bytes() == b"years of writing\n"
    assert kept.relative_to(tmp_path).as_posix().startswith(".history/notes/a.md.")


def test_a_change_is_made_to_the_note_as_it_is_when_it_is_written(tmp_path):
    path = make(tmp_path, "a.md", b"what the agent read\n")
    path.write_bytes(b"what the agent read\nthe person added this meanwhile\n")
    save_note(tmp_path, "a.md", lambda text: text + "the agent's line\n", "append")
    assert path.read_bytes() == b"what the agent read\nthe person added this meanwhile\nthe agent's line\n"


def test_move_refuses_existing_target_and_missing_source(tmp_path):
    make(tmp_path, "a.md", b"A")
    make(tmp_path, "b.md", b"B")
    with pytest.raises(VersionError, match="already exists"):
        move_note(tmp_path, "a.md", "b.md")
    with pytest.raises(VersionError, match="does not exist"):
        move_note(tmp_path, "zzz.md", "c.md")
    assert (tmp_path / "a.md").read_bytes() == b"A" and (tmp_path / "b.md").read_bytes() == b"B"
    assert move_note(tmp_path, "a.md", "sub/c.md") == "→ a.md → sub/c.md"
    assert not (tmp_path / "a.md").exists() and (tmp_path / "sub/c.md").read_bytes() == b"A"


def test_delete_keeps_a_copy(tmp_path):
    make(tmp_path, "old.md", b"gone?\n")
    assert delete_note(tmp_path, "old.md") == "- old.md"
    assert not (tmp_path / "old.md").exists()
    [kept] = history_files(tmp_path, "old.md")
    assert kept.read_bytes() == b"gone?\n"


# --- pruning ---


def fake_versions(kb, rel, ages_days, now):
    """Versions of rel taken ages_days ago, named as versions.snapshot names them; a clash gets -N."""
    make(kb, rel, b"current")
    for age in ages_days:
        name = f".history/{rel}.{(now - timedelta(days=age)).strftime(versions.STAMP_FORMAT)}"
        make(kb, name + ("-10" if (kb / name).exists() else ""), f"{age} days old".encode())


def test_prune_by_age_beyond_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "HISTORY_KEEP", 2)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    fake_versions(tmp_path, "n.md", [500, 5, 400, 3, 2, 1, 1], now)  # the second 1 clashes: it is the newer
    versions.prune_versions(tmp_path, "n.md")
    kept = [p.read_text() for p in history_files(tmp_path, "n.md")]
    assert kept == ["500 days old", "5 days old", "3 days old", "2 days old", "1 days old", "1 days old"]  # 400: too
    # old; 500 days: the oldest, what the note was before the agent changed it
    assert history_files(tmp_path, "n.md")[-1].name.endswith("-10")


def test_prune_by_size_takes_the_oldest_first_but_for_the_very_oldest_and_never_the_newest(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "HISTORY_KEEP", 1)
    monkeypatch.setattr(versions, "HISTORY_MAX_BYTES", 25)  # each fake version is 10 or 11 bytes
    now = datetime.now(timezone.utc).replace(microsecond=0)
    fake_versions(tmp_path, "n.md", [5, 4, 3, 2], now)
    versions.prune_versions(tmp_path, "n.md")
    assert [p.read_text() for p in history_files(tmp_path, "n.md")] == ["5 days old", "2 days old"]


def test_prune_leaves_other_notes_with_similar_names_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "HISTORY_KEEP", 1)
    monkeypatch.setattr(versions, "HISTORY_MAX_AGE_S", 1.5 * 86400)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    fake_versions(tmp_path, "n.md", [3, 2, 1], now)
    fake_versions(tmp_path, "n.md.bak.md", [3, 2, 1], now)
    versions.prune_versions(tmp_path, "n.md")
    assert [p.read_text() for p in history_files(tmp_path, "n.md")] == ["3 days old", "1 days old"]
    assert len(history_files(tmp_path, "n.md.bak.md")) == 3


def test_the_newest_version_older_than_an_hour_is_never_pruned(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "HISTORY_KEEP", 1)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    fake_versions(tmp_path, "n.md", [110, 100, 90, 0.01, 0.005], now)  # 14 and 7 minutes old: an hour protects both
    versions.prune_versions(tmp_path, "n.md")
    kept = [p.read_text() for p in history_files(tmp_path, "n.md")]
    assert kept == ["110 days old", "90 days old", "0.01 days old", "0.005 days old"]  # 90: before the last hour


def test_no_burst_of_changes_flushes_what_the_note_held_before(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "HISTORY_KEEP", 3)
    make(tmp_path, "n.md", b"v0\n")
    for i in range(1, 8):
        save_note(tmp_path, "n.md", f"v{i}\n", "overwrite")
    assert [p.read_text() for p in history_files(tmp_path, "n.md")] == [f"v{i}\n" for i in range(7)]
    monkeypatch.setattr(versions, "HISTORY_PROTECT_S", 0)  # even once all of them are old,
    monkeypatch.setattr(versions, "HISTORY_MAX_AGE_S", 0)
    versions.prune_versions(tmp_path, "n.md")  # the first this process kept (the note before it) stays
    assert [p.read_text() for p in history_files(tmp_path, "n.md")] == ["v0\n", "v4\n", "v5\n", "v6\n"]


def test_no_burst_of_changes_flushes_the_note_before_the_agent_first_changed_it(tmp_path, monkeypatch):
    """Found by a red team: the note's first version and an edit older than an hour, then one process overwrote
    it until the versions took too much room, and the size rule pruned the first version, the person's text."""
    monkeypatch.setattr(versions, "HISTORY_KEEP", 1)
    monkeypatch.setattr(versions, "HISTORY_MAX_BYTES", 100)
    now = datetime.now(timezone.utc)
    fake_versions(tmp_path, "n.md", [0.1, 0.08], now)  # 2.4 and 1.9 hours old: the original, then an edit
    for i in range(10):
        save_note(tmp_path, "n.md", f"{i}\n" + "x" * 30, "overwrite")
    kept = [p.read_text() for p in history_files(tmp_path, "n.md")]
    assert kept[:2] == ["0.1 days old", "0.08 days old"] and len(kept) == 12


# --- undo ---


def test_undo_with_nothing_recorded(tmp_path):
    assert undo_last(tmp_path).startswith("Nothing to undo")


def test_undo_create_removes_the_note_but_keeps_a_copy(tmp_path):
    save_note(tmp_path, "new.md", "draft\n", "write")
    message = undo_last(tmp_path)
    assert "removed new.md" in message
    assert not (tmp_path / "new.md").exists()
    assert [p.read_text() for p in history_files(tmp_path, "new.md")] == ["draft\n"]


@pytest.mark.parametrize("op", ["overwrite", "edit", "append"])
def test_undo_restores_the_previous_text_byte_for_byte(tmp_path, op):
    original = BOM + b"line one\r\nline two\r\n"
    path = make(tmp_path, "n.md", original)
    save_note(tmp_path, "n.md", "replaced\n", op)
    message = undo_last(tmp_path)
    assert f"the {op} of n.md" in message and "as it was" in message
    assert path.read_bytes() == original


def test_undo_move_moves_it_back(tmp_path):
    make(tmp_path, "a.md", b"A\n")
    move_note(tmp_path, "a.md", "archive/b.md")
    assert "moved archive/b.md back to a.md" in undo_last(tmp_path)
    assert (tmp_path / "a.md").read_bytes() == b"A\n"
    assert not (tmp_path / "archive/b.md").exists()


def test_undo_delete_brings_the_note_back(tmp_path):
    make(tmp_path, "old.md", b"keep me\n")
    delete_note(tmp_path, "old.md")
    assert "old.md is back" in undo_last(tmp_path)
    assert (tmp_path / "old.md").read_bytes() == b"keep me\n"


def test_undo_keeps_what_the_person_wrote_meanwhile(tmp_path):
    make(tmp_path, "n.md", b"v1\n")
    save_note(tmp_path, "n.md", "v2 by agent\n", "overwrite")
    (tmp_path / "n.md").write_text("v3 by the person\n")
    message = undo_last(tmp_path)
    assert (tmp_path / "n.md").read_text() == "v1\n"
    assert "kept in .history/n.md." in message
    assert "v3 by the person\n" in [p.read_text() for p in history_files(tmp_path, "n.md")]


def test_undo_delete_keeps_a_note_the_person_created_at_that_path(tmp_path):
    make(tmp_path, "n.md", b"old\n")
    delete_note(tmp_path, "n.md")
    (tmp_path / "n.md").write_text("person's new note\n")
    undo_last(tmp_path)
    assert (tmp_path / "n.md").read_text() == "old\n"
    assert "person's new note\n" in [p.read_text() for p in history_files(tmp_path, "n.md")]


def test_undo_move_keeps_a_note_the_person_created_at_the_old_path(tmp_path):
    make(tmp_path, "a.md", b"moved\n")
    move_note(tmp_path, "a.md", "b.md")
    (tmp_path / "a.md").write_text("person's a\n")
    undo_last(tmp_path)
    assert (tmp_path / "a.md").read_text() == "moved\n"
    assert [p.read_text() for p in history_files(tmp_path, "a.md")] == ["person's a\n"]


def test_undo_goes_back_one_change_at_a_time(tmp_path):
    make(tmp_path, "n.md", b"1\n")
    save_note(tmp_path, "n.md", "2\n", "edit")
    save_note(tmp_path, "n.md", "3\n", "edit")
    move_note(tmp_path, "n.md", "m.md")
    undo_last(tmp_path)
    undo_last(tmp_path)
    assert (tmp_path / "n.md").read_text() == "2\n"
    undo_last(tmp_path)
    assert (tmp_path / "n.md").read_text() == "1\n"
    assert undo_last(tmp_path).startswith("Nothing to undo")


def test_undo_of_a_change_that_cannot_be_undone_is_dropped_with_a_reason(tmp_path):
    make(tmp_path, "a.md", b"A\n")
    make(tmp_path, "x.md", b"X\n")
    save_note(tmp_path, "x.md", "X2\n", "edit")
    move_note(tmp_path, "a.md", "b.md")
    (tmp_path / "b.md").unlink()  # the person deleted it by hand
    message = undo_last(tmp_path)
    assert message.startswith("Could not undo the move of a.md → b.md") and "b.md no longer exists" in message
    assert "x.md is as it was" in undo_last(tmp_path)  # the next undo still works
    assert (tmp_path / "x.md").read_text() == "X\n"


def test_undo_reports_each_touched_path(tmp_path):
    make(tmp_path, "a.md", b"A\n")
    move_note(tmp_path, "a.md", "b.md")
    _, touched = versions.undo_last(tmp_path)
    assert sorted(touched) == ["a.md", "b.md"]


def test_undo_log_survives_garbage_lines_and_stays_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(versions, "UNDO_LOG_KEEP", 3)
    make(tmp_path, "n.md", b"0\n")
    for i in range(1, 10):
        save_note(tmp_path, "n.md", f"{i}\n", "edit")
    with open(tmp_path / ".history" / versions.UNDO_LOG, "a") as f:
        f.write("{not json\n")
    assert len(versions.read_log(tmp_path)) <= 2 * 3
    assert "as it was" in undo_last(tmp_path)
    assert (tmp_path / "n.md").read_text() == "8\n"


def test_undo_past_the_changes_it_remembers_says_so(tmp_path, monkeypatch):
    """Found by a red team: past the undo log's last changes /undo said no change was ever recorded, while the
    versions before them were still in .history."""
    monkeypatch.setattr(versions, "UNDO_LOG_KEEP", 3)
    make(tmp_path, "n.md", b"0\n")
    for i in range(1, 10):
        save_note(tmp_path, "n.md", f"{i}\n", "edit")
    undone = 0
    while (message := undo_last(tmp_path)).startswith("Undid"):
        undone += 1
    assert 3 <= undone < 9 and (tmp_path / "n.md").read_text() == f"{9 - undone}\n"
    assert message.startswith("Nothing more to undo:") and "kept in .history/" in message
    assert history_files(tmp_path, "n.md")[0].read_text() == "0\n"


def test_a_log_that_cannot_be_read_for_a_moment_is_never_written_over(tmp_path, monkeypatch):
    for name in ("a.md", "b.md", "c.md"):
        make(tmp_path, name, b"old\n")
        save_note(tmp_path, name, "new\n", "edit")
    real, failed = versions.read_bytes, []

    def busy_once(kb, rel, *args):  # e.g. too many open files, or a sync client holding the file
        if rel.endswith(versions.UNDO_LOG) and not failed:
            failed.append(rel)
            raise OSError(24, "Too many open files")
        return real(kb, rel, *args)
    monkeypatch.setattr(versions, "read_bytes", busy_once)
    save_note(tmp_path, "a.md", "newer\n", "edit")
    assert failed and [e["path"] for e in versions.read_log(tmp_path)] == ["a.md", "b.md", "c.md", "a.md"]


# --- summaries ---


def test_change_summaries(tmp_path):
    assert save_note(tmp_path, "new.md", "a\n" * 12, "write") == "+ new.md  +12"
    assert change_summary("notes/git.md", "a\nb\nc\n", "a\nB\nB2\nB3\nc\n") == "~ notes/git.md  +3 \u22121"
    assert save_note(tmp_path, "new.md", lambda text: text + "b\n", "append") == "~ new.md  +1 \u22120"
    assert move_note(tmp_path, "new.md", "old.md") == "→ new.md → old.md"
    assert delete_note(tmp_path, "old.md") == "- old.md"


def test_summary_of_a_one_line_edit_in_a_long_note_is_fast_and_exact():
    old = "".join(f"line {i}\n" for i in range(200_000))
    new = old.replace("line 100000\n", "line 100000 fixed\n")
    assert change_summary("long.md", old, new) == "~ long.md  +1 \u22121"


def test_no_change_without_a_place_for_the_old_version(tmp_path):
    make(tmp_path, "n.md", b"keep\n")
    (tmp_path / ".history").write_text("a file where the folder should be")
    with pytest.raises(VersionError, match="could not keep a copy of n.md in .history/"):
        save_note(tmp_path, "n.md", "new\n", "overwrite")
    with pytest.raises(VersionError, match="nothing was changed"):
        delete_note(tmp_path, "n.md")
    assert (tmp_path / "n.md").read_bytes() == b"keep\n"


def test_undo_that_cannot_keep_a_copy_changes_nothing_and_can_be_retried(tmp_path, monkeypatch):
    make(tmp_path, "n.md", b"v1\n")
    save_note(tmp_path, "n.md", "v2\n", "edit")
    (tmp_path / "n.md").write_text("v2 and the person's own line\n")  # so undo must keep a copy first

    def disk_full(*args, **kwargs):
        raise VersionError("could not keep a copy of n.md in .history/ (No space left on device)")

    monkeypatch.setattr(versions, "snapshot", disk_full)
    assert undo_last(tmp_path).startswith("Error: could not undo the edit of n.md")
    assert (tmp_path / "n.md").read_text() == "v2 and the person's own line\n"
    monkeypatch.undo()
    assert "as it was" in undo_last(tmp_path)
    assert (tmp_path / "n.md").read_text() == "v1\n"


def test_undo_ignores_log_lines_that_point_outside_the_notes(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    (tmp_path / "outside.md").write_text("precious")
    (tmp_path / "empty").mkdir()
    make(kb, "n.md", b"v1\n")
    save_note(kb, "n.md", "v2\n", "edit")
    log = kb / ".history" / "undo.jsonl"
    with open(log, "a", encoding="utf-8") as f:
        for bad in ({"op": "write", "path": "../outside.md"}, {"op": "write", "path": str(tmp_path / "outside.md")},
                    {"op": "edit", "path": "n.md", "snapshot": "../outside.md"},
                    {"op": "write", "path": "n.md", "made": ["../empty"]}, {"op": "write", "path": "n.md", "made": [7]}):
            f.write(json.dumps(bad) + "\n")
        f.write(json.dumps({"op": "edit", "path": "n.md", "snapshot": None, "time": None}) + "\n")
    undo_last(kb)  # the null-time line: refused cleanly, not a TypeError
    assert (tmp_path / "outside.md").read_text() == "precious"
    while not undo_last(kb).startswith("Nothing to undo"):
        pass
    assert (tmp_path / "outside.md").read_text() == "precious" and (kb / "n.md").read_text() == "v1\n"
    assert (tmp_path / "empty").is_dir()


def test_undo_removes_only_empty_folders_above_the_note_it_undoes(tmp_path):
    """The log may be edited by hand: "made" names folders undo may remove, so only those above the note undone
    count, and a "made" undo cannot read leaves the change undoable rather than hiding it."""
    kb = tmp_path / "kb"
    (kb / "Person/keep").mkdir(parents=True)
    make(kb, "old.md", b"v1\n")
    save_note(kb, "old.md", "v2\n", "edit")
    log = kb / ".history" / "undo.jsonl"
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps({"op": "write", "path": "./.history/undo.jsonl"}) + "\n")  # never followed
        f.write(json.dumps({"op": "write", "path": "a.md", "to": "Person/keep/x.md", "made": ["Person/keep"]}) + "\n")
        f.write(json.dumps({"op": "write", "path": "b.md", "made": "nope"}) + "\n")
    make(kb, "a.md", b"a\n")
    make(kb, "b.md", b"b\n")
    assert undo_last(kb).startswith("Undid the write of b.md")  # the newest change, not an older one
    assert undo_last(kb).startswith("Undid the write of a.md")
    assert (kb / "Person/keep").is_dir() and log.is_file()
    assert undo_last(kb).startswith("Undid the edit of old.md")


def test_a_note_that_could_not_be_created_leaves_no_folders_behind(tmp_path):
    too_long = "new/deeper/" + "x" * 300 + ".md"  # a name too long for the disk
    with pytest.raises(VersionError, match="could not save"):
        save_note(tmp_path, too_long, "text\n", "write")
    assert [p.name for p in tmp_path.iterdir()] == [".history"]  # its lock; no new/ nor new/deeper/
    make(tmp_path, "a.md", b"a\n")
    with pytest.raises(VersionError, match="could not move"):
        move_note(tmp_path, "a.md", too_long)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".history", "a.md"]


def test_a_failed_save_takes_back_only_its_own_undo_entry(tmp_path, monkeypatch):
    make(tmp_path, "a.md", b"a1\n")
    make(tmp_path, "b.md", b"b1\n")
    save_note(tmp_path, "a.md", "a2\n", "edit")
    monkeypatch.setattr(versions, "_log_change", lambda *args, **kwargs: "  (done, but /undo will not know)")
    disk_full_for(monkeypatch, "b.md")
    with pytest.raises(VersionError, match="No space left"):
        save_note(tmp_path, "b.md", "b2\n", "edit")
    monkeypatch.undo()
    assert [entry["path"] for entry in versions.read_log(tmp_path)] == ["a.md"]  # the edit of a.md stays undoable


def test_a_prune_that_fails_never_fails_the_change_nor_its_undo(tmp_path, monkeypatch):
    """Another process pruning the same versions first: the change is written, and said to be; so is its undo."""
    def pruned_by_another(*_):
        raise FileNotFoundError(2, "No such file or directory")
    make(tmp_path, "n.md", b"before\n")
    monkeypatch.setattr(versions, "list_versions", pruned_by_another)
    assert "could not" not in save_note(tmp_path, "n.md", "after\n", "overwrite")
    assert (tmp_path / "n.md").read_text() == "after\n"
    message = undo_last(tmp_path)
    assert "as it was" in message and (tmp_path / "n.md").read_text() == "before\n"
    assert undo_last(tmp_path).startswith("Nothing to undo")  # the undo list knows it was undone
