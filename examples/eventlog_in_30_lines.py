import tempfile

from liteagent.eventlog import conversation, file_checkpointer, fold, messages_to_dicts
from liteagent.eventlog.types import TextBlock, UserPrompt

with file_checkpointer(tempfile.mkdtemp()) as cp:
    head = cp.append("s1", [UserPrompt(content=(TextBlock("hello"),))])  # -> 1
    head = cp.append("s1", [UserPrompt(content=(TextBlock("again"),))], expected_head=head)
    state = fold(cp.read("s1"))  # resume: read + fold, pure
    print(messages_to_dicts(conversation(state)))  # Anthropic Messages shape
    pos = cp.position("s1")  # (head, generation)
    cp.truncate("s1", 1, expected_head=pos.head, expected_generation=pos.generation)
