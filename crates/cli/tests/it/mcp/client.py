"""Drives `agentbox mcp` with the official MCP Python SDK (PyPI `mcp`) over stdio, or over
streamable HTTP.

usage: client.py AGENTBOX CALLS_JSON
       client.py http://HOST:PORT/mcp CALLS_JSON   (token in $AGENTBOX_TOKEN)

Starts `AGENTBOX mcp` (its environment and directory are this process's), or connects to
the URL with `Authorization: Bearer $AGENTBOX_TOKEN`; initializes,
lists the tools, then makes each call of CALLS_JSON (a list of {"tool", "arguments"}) in
order, and prints one JSON document: the server's name, every tool with its input schema,
and each call's result (is_error, structured content, text).
"""

import asyncio
import contextlib
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


@contextlib.asynccontextmanager
async def connect(target):
    if target.startswith("http://"):
        from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

        headers = {"Authorization": "Bearer " + os.environ.get("AGENTBOX_TOKEN", "")}
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(target, http_client=http) as streams:
                yield streams[0], streams[1]
    else:
        params = StdioServerParameters(
            command=target, args=["mcp"], env=dict(os.environ), cwd=os.getcwd()
        )
        async with stdio_client(params) as (read, write):
            yield read, write


async def main(target, calls):
    async with connect(target) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            listed = await session.list_tools()
            results = []
            for call in calls:
                r = await session.call_tool(call["tool"], call.get("arguments", {}))
                results.append(
                    {
                        "is_error": bool(r.is_error),
                        "structured": r.structured_content,
                        "text": "".join(
                            c.text for c in r.content if getattr(c, "type", "") == "text"
                        ),
                    }
                )
            return {
                "server": init.server_info.name,
                "tools": [
                    {"name": t.name, "input_schema": t.input_schema} for t in listed.tools
                ],
                "results": results,
            }


if __name__ == "__main__":
    out = asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
    print(json.dumps(out))
