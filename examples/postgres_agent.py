"""The README's "PostgreSQL" block, then one prompt: ``DATABASE_URL`` names the server (a
libpq connection string or URI), ``ANTHROPIC_API_KEY`` the key, and the agent works on the
current folder.

Run: DATABASE_URL=postgresql://me@localhost/scratch python examples/postgres_agent.py
"""

# The README's block (tests/test_examples.py checks that it is the same there):
import os

from liteagent.eventlog import postgres_checkpointer
from liteagent.providers import anthropic
from liteagent.sdk import create_lite_agent

cp = postgres_checkpointer(os.environ["DATABASE_URL"], schema="liteagent")
agent = create_lite_agent(model=anthropic(), model_name="claude-sonnet-4-5", checkpointer=cp)
# (end of the README's block)

with agent:
    print(agent.send("Say hello").text)
    print("stored:", [stored.kind for stored in cp.read(agent.session_id)])
cp.close()
