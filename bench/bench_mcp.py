"""What the MCP layer costs: the same tool calls through mcp_server.py over stdio vs execute_tool in-process.

    python bench/bench_mcp.py [path/to/tldr-kb.tar.gz]

Unpacks the notes corpus to a temp folder, then times N calls of each tool both ways and prints the
ratio (MCP / in-process) plus the server's start-up time to its first reply. The corpus is never copied
into the repo. Search time is search.py's; the ratio shows what JSON-RPC and the pipe add on top.
"""

import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tools  # noqa: E402
from config import load_settings  # noqa: E402
from notebook import Notebook  # noqa: E402

DEFAULT_CORPUS = Path("/work/shared/corpus/tldr-kb.tar.gz")
CALLS = 30
CASES = [  # (tool, arguments): a search over every note, a short read, a listing
    ("search_notes", {"query": "compress archive"}),
    ("read_note", {"file_path": "en/common/tar.md"}),
    ("list_notes", {"folder": "en/linux"}),
]


class Server:
    def __init__(self, kb: Path):
        started = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "mcp_server.py"), "--kb", str(kb)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})
        self.startup = time.perf_counter() - started

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def timed(function) -> float:
    samples = []
    for _ in range(CALLS):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CORPUS
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(corpus) as archive:
            archive.extractall(tmp, filter="data")
        kb = Path(tmp) / "kb"
        notes = sum(1 for _ in kb.rglob("*.md"))
        notebook = Notebook(load_settings(kb=str(kb)))
        server = Server(kb)
        print(f"{notes} notes; server start-up to first reply: {server.startup * 1000:.0f} ms; "
              f"median of {CALLS} calls each")
        print(f"{'tool':<14}{'in-process':>12}{'over MCP':>12}{'ratio':>8}")
        for name, arguments in CASES:
            direct = timed(lambda: tools.execute_tool(name, arguments, notebook))
            reply = server.request("tools/call", {"name": name, "arguments": arguments})
            assert reply["result"]["isError"] is False, reply
            over_mcp = timed(lambda: server.request("tools/call", {"name": name, "arguments": arguments}))
            print(f"{name:<14}{direct * 1000:>10.2f}ms{over_mcp * 1000:>10.2f}ms{over_mcp / direct:>8.2f}")
        server.close()


if __name__ == "__main__":
    main()
