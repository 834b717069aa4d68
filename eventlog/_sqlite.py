def sqlite_checkpointer(*a, **k): raise NotImplementedError
