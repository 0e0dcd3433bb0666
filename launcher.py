"""The installed commands (pyproject.toml's [project.scripts]): `knowledge-agent` and `ka` run main.py,
`knowledge-agent-mcp` runs mcp_server.py. A clone never needs this file: `python main.py` is the same thing.

`pip install .` installs the project as one package, knowledge_agent (this folder), so site-packages gains no
generic name such as `config` or `tools`. Its modules still import each other by plain names (`import tools`),
as in a clone; so each command first puts the package's own folder at the front of sys.path, and in its
process `config` is knowledge-agent's whatever else is installed. Never import this from a library: the
modules are meant to be imported from a clone (`from agent import run_agent`), not as knowledge_agent.*.
"""

import runpy
import sys
from pathlib import Path


def _run(module: str) -> None:
    """Run one of the project's modules as `python module.py` does, found in this folder before anywhere else on
    sys.path; its exit code is the SystemExit it ends with."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    runpy.run_module(module, run_name="__main__")


def main() -> None:
    _run("main")


def mcp() -> None:
    _run("mcp_server")
