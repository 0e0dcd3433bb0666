"""Two writers on one notes folder (a chat and an MCP client, two chats): no change is ever lost.

Each writer is a real process calling tools.execute_tool, as the REPL and the MCP server do; the two are
started together and run flat out on the same note.
"""

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
settings = Settings(None, "", "", Path({kb!r}), index_dir=Path({cache!r}))
sys.stdin.readline()  # start together
for i in range({count}):
    args = {{"file_path": "shared.md", "content": "{name} " + str(i)}} if "{tool}" == "append_note" else \\
        {{"file_path": "shared.md", "old_text": "{name}-" + str(i) + ".", "new_text": "{name}-" + str(i) + " done."}}
    result = tools.execute_tool("{tool}", args, settings)
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
