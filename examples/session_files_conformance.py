import functools

from session_files_backend import session_files_checkpointer  # examples/ is on sys.path

from liteagent.eventlog.conformance import (
    CheckpointerConformance,
    CrashConformance,
    DurableConformance,
)


class TestSessionFilesCheckpointer(CheckpointerConformance, DurableConformance, CrashConformance):
    def checkpointer_factory(self, path):
        return functools.partial(session_files_checkpointer, path)
