"""The installed commands (pyproject.toml's [project.scripts]): `knowledge-agent` and `ka` run main.py,
`knowledge-agent-mcp` runs mcp_server.py; a clone needs none of this (`python main.py` is the same thing).

`pip install .` installs one package, knowledge_agent (this folder), so site-packages gains no generic name such
as `config`; its modules still import each other by plain names (`import tools`), so each command first puts
this folder at the front of sys.path. Never import this from a library: the modules are a clone's, not a package's.
"""

import runpy
import sys
from functools import partial
from pathlib import Path


def _run(module: str) -> None:
    """Run this folder's `module` as `python module.py` does; its exit code is the SystemExit it ends with."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    runpy.run_module(module, run_name="__main__")


main = partial(_run, "main")
mcp = partial(_run, "mcp_server")
