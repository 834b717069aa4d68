from liteagent.eventlog.types import Message, ModelRequest, TextBlock
from liteagent.providers import AnthropicProvider
from liteagent.providers.testing import FakeMessagesServer, message, overloaded, text

request = ModelRequest(model="claude-sonnet-4-5", messages=(Message("user", (TextBlock("Hi"),)),))
with FakeMessagesServer() as server:
    server.add(overloaded(), message([text("hello")]))
    with AnthropicProvider(server.client(), ()) as provider:  # strict validation, no proxies
        response = provider.complete(request)
    assert [0, 1] == [r.retry_count for r in server.requests]
print(response.message.content)  # (TextBlock(text='hello', extra=UNSET),)
