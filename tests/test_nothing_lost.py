"""Nothing lost: two writers on one notes folder, and a writer killed in the middle of a change.

Each writer is a real process calling tools.execute_tool, as the REPL and the MCP server do.
"""

import hashlib
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRITER = """
import sys
sys.path.insert(0, {root!r})
from pathlib import Path
import tools
from config import Settings
from notebook import Notebook
notebook = Notebook(Settings(None, "", "", Path({kb!r}), index_dir=Path({cache!r})))
sys.stdin.readline()  # start together
for i in range({count}):
    args = {{"file_path": "shared.md", "content": "{name} " + str(i)}} if "{tool}" == "append_note" else \\
        {{"file_path": "shared.md", "old_text": "{name}-" + str(i) + ".", "new_text": "{name}-" + str(i) + " done."}}
    result = tools.execute_tool("{tool}", args, notebook)
    if result.error:
        print(result.text)
"""


def run_two(tmp_path, kb, tool: str, count: int) -> list[str]:
    writers = []
    for name in ("chat", "mcp"):
        script = WRITER.format(root=str(ROOT), kb=str(kb), cache=str(tmp_path / f"cache-{name}"), count=count,
                               name=name, tool=tool)
        writers.append(subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True))
    for writer in writers:
        writer.stdin.write("go\n")
        writer.stdin.flush()
    errors = [writer.communicate(timeout=120)[0] for writer in writers]
    assert all(writer.returncode == 0 for writer in writers)
    return errors


def test_two_processes_appending_to_one_note_lose_nothing(tmp_path, kb):
    (kb / "shared.md").write_text("# Log\n", encoding="utf-8")
    assert run_two(tmp_path, kb, "append_note", 150) == ["", ""]
    lines = (kb / "shared.md").read_text(encoding="utf-8").splitlines()
    for name in ("chat", "mcp"):
        assert [line for line in lines if line.startswith(name)] == [f"{name} {i}" for i in range(150)]


def test_two_processes_editing_one_note_lose_nothing(tmp_path, kb):
    items = [f"{name}-{i}." for i in range(150) for name in ("chat", "mcp")]
    (kb / "shared.md").write_text("# Tasks\n" + "".join(f"- {item}\n" for item in items), encoding="utf-8")
    assert run_two(tmp_path, kb, "edit_note", 150) == ["", ""]
    text = (kb / "shared.md").read_text(encoding="utf-8")
    assert text == "# Tasks\n" + "".join(f"- {item[:-1]} done.\n" for item in items)


# Reads crash moments, one a line: for each, forks a writer (this process has imported everything already, so
# the writer starts at once), lets it rewrite big.md for that many seconds, kills it and says so.
KILLED_WRITERS = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
import tools
from config import Settings
from notebook import Notebook
notebook = Notebook(Settings(None, "", "", Path({kb!r}), index_dir=Path({cache!r})))
for moment in sys.stdin:
    writer = os.fork()
    if writer == 0:
        for i in range(1000):
            tools.execute_tool("write_note", {{"file_path": "big.md", "content": (f"v{{i}} " * 400_000),
                                              "overwrite": True}}, notebook)
        os._exit(0)
    time.sleep(float(moment))  # the moment of the crash: the writer never ends before it
    os.kill(writer, signal.SIGKILL)
    os.waitpid(writer, 0)
    print("killed", flush=True)
"""


def test_a_writer_killed_mid_change_leaves_an_undoable_note_and_no_temp_files(tmp_path, kb):
    """kill -9 at random moments while 4 MB notes are rewritten: the note is always a whole version, the
    version on disk always has its undo entry, and the next change removes any temp file left behind."""
    import versions
    import tools
    from config import Settings
    from notebook import Notebook
    notebook = Notebook(Settings(None, "", "", kb, index_dir=tmp_path / "cache"))
    (kb / "big.md").write_text("original\n", encoding="utf-8")
    script = KILLED_WRITERS.format(root=str(ROOT), kb=str(kb), cache=str(tmp_path / "cache-killed"))
    writers = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rng = random.Random(11)
    for _ in range(12):
        writers.stdin.write(f"{rng.uniform(0.05, 0.6)}\n")
        writers.stdin.flush()
        assert writers.stdout.readline() == "killed\n"
        data = (kb / "big.md").read_bytes()
        words = set(data.split())
        assert data == b"original\n" or len(words) == 1  # a whole version, never half of two
        if data != b"original\n":
            recorded = [f["after"] for entry in versions.read_log(kb) for f in entry["files"]]
            assert hashlib.sha256(data).hexdigest() in recorded  # /undo knows of the version on disk
        assert tools.execute_tool("append_note", {"file_path": "big.md", "content": "x"}, notebook).error is False
        left = [p for p in kb.rglob(".~*.tmp")]
        assert left == []
        (kb / "big.md").write_bytes(data)  # back to what the crash left, for the next round
    writers.stdin.close()
    assert writers.wait(timeout=60) == 0


def test_a_folder_swapped_for_a_link_mid_change_never_leads_outside(tmp_path, kb):
    """Something with write access (a sync client, another program) swaps work/ for a link to a folder
    outside the notes, over and over, while the tools write, append to and read notes in it."""
    import os
    import threading
    import tools
    from config import Settings
    from notebook import Notebook
    notebook = Notebook(Settings(None, "", "", kb, index_dir=tmp_path / "cache"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "meeting.md").write_text("SECRET outside\n", encoding="utf-8")
    real, aside = kb / "work", kb / "work-real"
    stop, swaps = threading.Event(), [0]

    def swap():
        while not stop.is_set():
            os.rename(real, aside)
            os.symlink(outside, kb / "link")
            try:
                os.rename(kb / "link", real)  # work/ is now a link to outside, for a moment
                stop.wait(0.002)
            except OSError:  # a write just made a new work/ folder: leave it
                os.unlink(kb / "link")
            while True:  # put the real folder back, keeping what a write made meanwhile
                if real.is_symlink():
                    os.unlink(real)
                for entry in os.listdir(real) if real.is_dir() else ():
                    try:
                        os.replace(real / entry, aside / entry)
                    except FileNotFoundError:  # a writer's temp file, removed by the writer since listed
                        pass
                try:
                    os.rename(aside, real)  # over a missing or empty folder
                    break
                except OSError:
                    continue
            swaps[0] += 1

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        for i in range(600):
            tools.execute_tool("write_note", {"file_path": f"work/new{i}.md", "content": "x"}, notebook)
            tools.execute_tool("append_note", {"file_path": "work/meeting.md", "content": "line"}, notebook)
            read = tools.execute_tool("read_note", {"file_path": "work/meeting.md"}, notebook)
            assert "SECRET" not in read.text
    finally:
        stop.set()
        swapper.join()
    assert swaps[0] > 20  # the swap really raced the tools
    assert sorted(p.name for p in outside.iterdir()) == ["meeting.md"]
    assert (outside / "meeting.md").read_text(encoding="utf-8") == "SECRET outside\n"
