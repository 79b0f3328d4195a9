"""An MCP server written with the official Python SDK (PyPI `mcp`), started over stdio by the model agent's
tests. Each start appends a line to $MCP_STARTS_FILE, so a test can count restarts."""

import os

from mcp.server.fastmcp import Context, FastMCP

server = FastMCP("notes")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool()
def refuse(reason: str) -> str:
    """Always fails, with the reason given."""
    raise ValueError(reason)


@server.tool()
def traceparent(ctx: Context) -> str:
    """The W3C traceparent this call's request carried in its _meta (empty without one)."""
    meta = ctx.request_context.meta
    extra = (meta.model_extra or {}) if meta is not None else {}
    return extra.get("traceparent") or ""


@server.tool()
def crash() -> str:
    """Ends the server process at once (for the supervision test)."""
    os._exit(3)


if __name__ == "__main__":
    starts = os.environ.get("MCP_STARTS_FILE")
    if starts:
        with open(starts, "a") as f:
            f.write("start\n")
    server.run()
