"""From outside, as a tester would: two writers at once, a writer killed mid-change, a folder swapped for a link.

    python bench/nothing_lost_bench.py                      this checkout
    python bench/nothing_lost_bench.py --root /path/to/old  another checkout of the project, to compare

1. two writers: an MCP server (a real process, JSON-RPC on stdio) and a second process calling the tools
   append to and edit one note at the same time, flat out; counts what was kept.
2. kill -9: a process rewriting a 4 MB note is killed at random moments; counts versions on disk that
   /undo knows nothing of, and temp files still there after the next change.
3. link swap: work/ is swapped for a link to an outside folder over and over while the tools write, append
   and read in it; counts files made outside and outside text read.
Every notes folder is a fresh temporary one. Runs only APIs both old and new checkouts have
(load_settings, execute_tool, given a Notebook of the settings where there is one), reading results as text either
way.
"""

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fresh_notes() -> tuple[Path, dict]:
    kb = Path(tempfile.mkdtemp()) / "notes"
    kb.mkdir()
    return kb, dict(os.environ, XDG_CACHE_HOME=str(kb.parent / "cache"), XDG_DATA_HOME=str(kb.parent / "data"))


def tools_script(root: Path, kb: Path, body: str) -> str:
    return (f"import sys; sys.path.insert(0, {str(root)!r})\nimport tools\nfrom config import load_settings\n"
            f"s = load_settings(kb={str(kb)!r})\n"
            "try:\n    from notebook import Notebook  # the tools take one since there is one\n    s = Notebook(s)\n"
            "except ImportError:\n    pass\n" + body)


def two_writers(root: Path, count: int) -> str:
    kb, env = fresh_notes()
    (kb / "log.md").write_text("# Log\n" + "".join(f"- task mcp-{i}.\n- task chat-{i}.\n" for i in range(count)))
    mcp = subprocess.Popen([sys.executable, str(root / "mcp_server.py"), "--kb", str(kb)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

    def call(number, method, params):
        mcp.stdin.write(json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}) + "\n")
        mcp.stdin.flush()
        return json.loads(mcp.stdout.readline())

    call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench"}})
    chat = subprocess.Popen([sys.executable, "-c", tools_script(root, kb, f"""
for i in range({count}):
    tools.execute_tool("append_note", {{"file_path": "log.md", "content": f"chat appended {{i}}"}}, s)
    tools.execute_tool("edit_note", {{"file_path": "log.md", "old_text": f"task chat-{{i}}.",
                                     "new_text": f"task chat-{{i}} done."}}, s)
""")], env=env)
    for i in range(count):
        call(2 * i + 1, "tools/call", {"name": "append_note",
                                       "arguments": {"file_path": "log.md", "content": f"mcp appended {i}"}})
        call(2 * i + 2, "tools/call", {"name": "edit_note", "arguments": {
            "file_path": "log.md", "old_text": f"task mcp-{i}.", "new_text": f"task mcp-{i} done."}})
    chat.wait()
    mcp.stdin.close()
    mcp.wait()
    text = (kb / "log.md").read_text()
    appends = sum(f"{who} appended {i}\n" in text for who in ("mcp", "chat") for i in range(count))
    edits = sum(f"task {who}-{i} done." in text for who in ("mcp", "chat") for i in range(count))
    return f"two writers: appends kept {appends}/{2 * count}, edits kept {edits}/{2 * count}"


def killed_writer(root: Path, kills: int) -> str:
    kb, env = fresh_notes()
    (kb / "big.md").write_text("original\n")
    code = tools_script(root, kb, """print("ready", flush=True)
for i in range(LIMIT):
    tools.execute_tool("write_note", {"file_path": "big.md", "content": f"v{i} " * 400_000, "overwrite": True}, s)
""")
    rng, unknown, temps = random.Random(3), 0, 0
    for _ in range(kills):
        writer = subprocess.Popen([sys.executable, "-c", code.replace("LIMIT", "10**6")], stdout=subprocess.PIPE,
                                  text=True, env=env)
        writer.stdout.readline()
        try:
            writer.wait(timeout=rng.uniform(0.05, 0.8))  # the moment of the crash
        except subprocess.TimeoutExpired:
            writer.kill()
        writer.wait()
        data, log = (kb / "big.md").read_bytes(), kb / ".history" / "undo.jsonl"
        entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        afters = [f.get("after") for e in entries for f in e.get("files") or [e]]  # one file's entry, or a change's
        unknown += data != b"original\n" and hashlib.sha256(data).hexdigest() not in afters
        # the next change brings new text: one with the same text writes nothing, so it would clean nothing
        after = code.replace("LIMIT", "1").replace('f"v{i} "', 'f"w{i} "')
        subprocess.run([sys.executable, "-c", after], env=env, stdout=subprocess.DEVNULL)
        temps += len(list(kb.rglob(".~*.tmp")))
    return (f"kill -9 x{kills}: versions on disk /undo did not know {unknown}; "
            f"temp files seen after the next change {temps} (summed over the rounds)")


SWAPPER = """
import os, threading
from pathlib import Path
kb, out = Path(s.kb), Path(OUTSIDE)
real, aside, stop = kb / "work", kb / "work-real", threading.Event()
def swap():
    while not stop.is_set():
        os.rename(real, aside)
        os.symlink(out, kb / "link")
        try:
            os.rename(kb / "link", real)
            stop.wait(0.002)
        except OSError:
            os.unlink(kb / "link")
        while True:
            if real.is_symlink():
                os.unlink(real)
            for entry in os.listdir(real) if real.is_dir() else ():
                os.replace(real / entry, aside / entry)
            try:
                os.rename(aside, real)
                break
            except OSError:
                continue
thread = threading.Thread(target=swap)
thread.start()
leaked = 0
for i in range(COUNT):
    tools.execute_tool("write_note", {"file_path": f"work/n{i}.md", "content": "x"}, s)
    tools.execute_tool("append_note", {"file_path": "work/meeting.md", "content": "line"}, s)
    result = tools.execute_tool("read_note", {"file_path": "work/meeting.md"}, s)
    leaked += "SECRET" in (result if isinstance(result, str) else result.text)
stop.set()
thread.join()
print(leaked)
"""


def link_swap(root: Path, count: int) -> str:
    kb, env = fresh_notes()
    (kb / "work").mkdir()
    (kb / "work" / "meeting.md").write_text("ours\n")
    outside = kb.parent / "outside"
    outside.mkdir()
    (outside / "meeting.md").write_text("SECRET\n")
    body = SWAPPER.replace("OUTSIDE", repr(str(outside))).replace("COUNT", str(count))
    done = subprocess.run([sys.executable, "-c", tools_script(root, kb, body)], env=env, capture_output=True, text=True)
    made = len(list(outside.iterdir())) - 1
    changed = (outside / "meeting.md").read_text() != "SECRET\n"
    return (f"link swap, {3 * count} calls: files made outside {made}, outside text read {done.stdout.strip()} "
            f"times, outside note changed: {changed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to try (default: this one)")
    parser.add_argument("--writes", type=int, default=300)
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--swaps", type=int, default=2000)
    args = parser.parse_args()
    print(f"checkout: {args.root}")
    print(two_writers(args.root.resolve(), args.writes))
    print(killed_writer(args.root.resolve(), args.kills))
    print(link_swap(args.root.resolve(), args.swaps))


if __name__ == "__main__":
    main()
