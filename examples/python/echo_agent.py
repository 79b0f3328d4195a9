#!/usr/bin/env python3
"""A tiny roost agent: it echoes each reply into its row, and is done on "bye".

Run by roost from a profile (agentwire's config):

    [roost.profiles.echo]
    command = ["python3", "/path/to/examples/python/echo_agent.py"]
    task = "type"
    protocol = true

The first task arrives as reply 1 and is echoed like any other reply.
"""

import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))

from roost_agent import RoostAgent  # noqa: E402


def main():
    bye = threading.Event()

    def on_reply(reply):
        if reply.text.strip() == "bye":
            agent.report("done", summary="got: bye", status="idle")
            bye.set()
        else:
            agent.report("working", summary="got: " + reply.text, status="busy")

    agent = RoostAgent.from_env("echo-agent", version="1.0", on_reply=on_reply)
    if agent is None:
        print("echo_agent: not run by roost (no ROOST_JOB_ID in the environment)", file=sys.stderr)
        return 2
    agent.report("working", summary="waiting for replies", status="busy")
    bye.wait()
    agent.close()  # the "bye" reply is acked and the done report sent before the agent exits
    return 0


if __name__ == "__main__":
    sys.exit(main())
