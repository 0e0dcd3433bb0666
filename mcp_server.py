"""The note tools as an MCP server, so Claude Desktop, Cursor, VS Code or any MCP client can use them.

    python mcp_server.py --kb ~/notes                       search, list, read and write notes
    python mcp_server.py --kb ~/notes --allow-destructive   also the tools the chat asks before running

It speaks the Model Context Protocol over stdio: JSON-RPC 2.0, one message per line, protocol revisions
2024-11-05 to 2025-11-25. The tools are the chat's own (tools.tool_schemas), run by tools.execute_tool — the same
path guard, checks and limits as the chat — and a tool's "Error: …" comes back as a result with isError.
Tools the chat asks a person about first (registered with confirm=True) are served only with
--allow-destructive (or MCP_ALLOW_DESTRUCTIVE=1), and the client is then the one that asks; the opt-in
shell only with --allow-shell (or MCP_ALLOW_SHELL=1) and ALLOW_SHELL=1. No API key needed.

stdout carries protocol messages and nothing else: a stray print in any imported code, or a child
process, writes to stderr instead. Logs go to stderr. Exit codes: 0 stdin closed, 2 bad settings or
usage, 130 Ctrl+C.
"""

import argparse
import copy
import json
import os
import sys

import tools
from config import ConfigError, Settings, load_settings, mcp_flags

# One JSON-RPC message per line; a longer line is skipped with an error, so memory stays bounded. Big
# enough for a 5 MB note sent as write_note content with every character \u-escaped.
MCP_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
SERVER_NAME = "knowledge-agent"
SERVER_VERSION = "0.1.0"
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
BATCH_VERSIONS = {"2025-03-26"}  # JSON-RPC batches came in with 2025-03-26 and left again in 2025-06-18
INSTRUCTIONS = (
    "Tools for one person's folder of Markdown notes (.md and .txt). Paths are relative to that folder. "
    "Search first (search_notes), then read_note the best hits before answering or changing anything."
)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700, -32600, -32601, -32602, -32603)


class RpcError(Exception):
    """A request that gets a JSON-RPC error instead of a result."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def log(message: str) -> None:
    sys.stderr.write(f"{SERVER_NAME} mcp: {message}\n")
    sys.stderr.flush()


# --- Tools, read from the registry in tools.py ---

def mcp_tool(tool: tools.Tool) -> dict:
    """An MCP tool description made from a registered tool (copied, so nothing shares state)."""
    function = tool.schema["function"]
    annotations = {"readOnlyHint": tool.read_only}
    if not tool.read_only:
        annotations["destructiveHint"] = tool.destructive
    return {"name": function["name"], "description": function["description"],
            "inputSchema": copy.deepcopy(function["parameters"]), "annotations": annotations}


def served_tools(settings: Settings, allow_destructive: bool, allow_shell: bool) -> dict[str, dict]:
    """The chat's tools, less those the chat asks a person about (unless allowed) and the opt-in shell
    (unless both the chat's settings and --allow-shell enable it)."""
    return {name: mcp_tool(tool) for name, tool in tools.offered(settings).items()
            if (allow_destructive or not tool.confirm) and (allow_shell or tool.opt_in is None)}


# --- The protocol ---

def response(request_id, result: dict) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _valid_id(value) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class McpServer:
    """The state of one connection: the settings, the tools served and the negotiated protocol version."""

    def __init__(self, settings: Settings, allow_destructive: bool = False, allow_shell: bool = False):
        self.settings = settings
        self.tools = served_tools(settings, allow_destructive, allow_shell)
        # The client asked the person already (it sees destructiveHint); without the flag, nobody can be asked.
        self.confirm = (lambda question: True) if allow_destructive else None
        self.version: str | None = None
        self.methods = {"initialize": self.initialize, "ping": lambda params: {},
                        "tools/list": self.list_tools, "tools/call": self.call_tool}

    def handle_line(self, line: bytes):
        """One line from the client -> the reply to write (a dict, a list for a batch) or None."""
        try:
            message = json.loads(line.decode("utf-8-sig"))  # a BOM: Windows tools put one before the first line
        except UnicodeDecodeError:
            return error_response(None, PARSE_ERROR, "Parse error: the line is not UTF-8 text.")
        except (ValueError, RecursionError) as exc:
            return error_response(None, PARSE_ERROR, f"Parse error: not valid JSON ({str(exc)[:200]}).")
        if not isinstance(message, list):
            return self.handle_message(message)
        if self.version not in BATCH_VERSIONS:
            return error_response(None, INVALID_REQUEST, "Invalid request: JSON-RPC batches exist only in protocol "
                                  f"version {', '.join(BATCH_VERSIONS)}; send one message per line.")
        if not message:
            return error_response(None, INVALID_REQUEST, "Invalid request: an empty batch.")
        replies = [r for r in (self.handle_message(item, in_batch=True) for item in message) if r is not None]
        return replies or None

    def handle_message(self, message, in_batch: bool = False) -> dict | None:
        if not isinstance(message, dict):
            return error_response(None, INVALID_REQUEST, "Invalid request: a message must be a JSON object.")
        is_request = "id" in message
        request_id = message.get("id")
        if is_request and not _valid_id(request_id):
            return error_response(None, INVALID_REQUEST, "Invalid request: id must be a string or an integer.")
        if message.get("jsonrpc") != "2.0":
            return error_response(request_id, INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0".')
        method = message.get("method")
        if method is None and ("result" in message or "error" in message):
            return None  # a reply to a request this server never sends; nothing to do
        if not isinstance(method, str):
            return error_response(request_id, INVALID_REQUEST, "Invalid request: method must be a string.")
        if not is_request:
            return None  # notifications (initialized, cancelled, …) never get a reply and need no action here
        params = message.get("params", {})
        if params is None:
            params = {}
        try:
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "Invalid params: params must be a JSON object.")
            if method == "initialize" and in_batch:
                raise RpcError(INVALID_REQUEST, "Invalid request: initialize may not be part of a batch.")
            handler = self.methods.get(method)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            return response(request_id, handler(params))
        except RpcError as exc:
            return error_response(request_id, exc.code, str(exc))
        except Exception as exc:  # a bug here must cost one request, never the connection
            log(f"{method} failed: {type(exc).__name__}: {exc}")
            return error_response(request_id, INTERNAL_ERROR, f"Internal error: {type(exc).__name__}")

    def initialize(self, params: dict) -> dict:
        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: protocolVersion (a string) is required.")
        self.version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        client = params.get("clientInfo") if isinstance(params.get("clientInfo"), dict) else {}
        log(f"client {client.get('name', '?')} {client.get('version', '')} asked for protocol {asked}, "
            f"speaking {self.version}")
        return {
            "protocolVersion": self.version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": SERVER_NAME, "version": SERVER_VERSION},
            "instructions": INSTRUCTIONS,
        }

    def list_tools(self, params: dict) -> dict:
        return {"tools": [copy.deepcopy(tool) for tool in self.tools.values()]}

    def call_tool(self, params: dict) -> dict:
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: name (a string) is required.")
        if name not in self.tools:
            hint = " (not served: see mcp_server.py --help)" if name in tools.TOOLS else ""
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}{hint}. Call tools/list for the tools served.")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, "Invalid params: arguments must be a JSON object.")
        result = tools.execute_tool(name, arguments, self.settings, self.confirm)
        log(f"{name}: {result.text.splitlines()[0][:100] if result.error else 'ok'}")
        return {"content": [{"type": "text", "text": result.text}], "isError": result.error}


# --- stdio ---

TOO_LONG = object()


def read_line(stream):
    """The next line as bytes (None at EOF, TOO_LONG for an oversized one, which is skipped unread)."""
    line = stream.readline(MCP_MAX_MESSAGE_BYTES + 1)
    if len(line) <= MCP_MAX_MESSAGE_BYTES or line.endswith(b"\n"):
        return line or None
    while True:  # drain the rest of the line a piece at a time, keeping memory bounded
        piece = stream.readline(1 << 20)
        if not piece or piece.endswith(b"\n"):
            return TOO_LONG


def write_message(fd: int, message) -> None:
    # ensure_ascii=False keeps Chinese notes readable; "replace" turns a lone surrogate (from an undecodable
    # file name) into "?" so the line is always valid UTF-8.
    data = (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def claim_stdio():
    """Keep private copies of stdin/stdout for the protocol; point fds 0 and 1 away from the client."""
    protocol_in = os.fdopen(os.dup(0), "rb")
    protocol_out = os.dup(1)
    if sys.platform == "win32":
        import msvcrt  # no "\r\n" for "\n" on the wire
        msvcrt.setmode(protocol_out, os.O_BINARY)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # nothing else may read the client's messages
    try:
        os.dup2(2, 1)  # a stray print or a child's output goes to the logs
    except OSError:
        os.dup2(devnull, 1)
    os.close(devnull)
    sys.stdin = open(os.devnull, encoding="utf-8")
    sys.stdout = sys.stderr
    return protocol_in, protocol_out


def serve(server: McpServer, protocol_in, protocol_out: int) -> None:
    while True:
        line = read_line(protocol_in)
        if line is None:
            return
        if line is TOO_LONG:
            reply = error_response(None, INVALID_REQUEST, f"Invalid request: a message longer than "
                                   f"{MCP_MAX_MESSAGE_BYTES} bytes was skipped.")
        elif not line.strip():
            continue
        else:
            reply = server.handle_line(line)
        if reply is not None:
            write_message(protocol_out, reply)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mcp_server.py",
        description="Serve the note tools to MCP clients (Claude Desktop, Cursor, VS Code, …) over stdio.",
    )
    parser.add_argument("--kb", metavar="PATH", help="notes folder (KNOWLEDGE_BASE; default knowledge_base/)")
    parser.add_argument("--allow-destructive", action="store_true",
                        help="also serve the tools the chat asks before running; the client asks instead "
                             "(MCP_ALLOW_DESTRUCTIVE=1)")
    parser.add_argument("--allow-shell", action="store_true",
                        help="also serve the shell tool, if the chat's settings enable it (MCP_ALLOW_SHELL=1)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        settings = load_settings(kb=args.kb)
        allow_destructive, allow_shell = mcp_flags(args.allow_destructive, args.allow_shell)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server = McpServer(settings, allow_destructive, allow_shell)
    protocol_in, protocol_out = claim_stdio()
    log(f"serving {len(server.tools)} tools ({', '.join(server.tools)}) for the notes in {settings.kb}")
    try:
        serve(server, protocol_in, protocol_out)
    except (BrokenPipeError, ConnectionResetError):  # the client went away; nobody is left to tell
        pass
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl+C: the client is stopping us, nothing to say
        sys.exit(130)
