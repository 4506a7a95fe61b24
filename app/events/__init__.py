"""Events: the model, the bounded live bus and the durable log (append with projection in one
transaction, fan-out after commit, replay by cursor), with the log's topology: one process, or
the relay that fans events out across processes sharing a database.

May import: ``app.store``. Invariant: per-session ``seq`` is allocated inside the write
transaction and stays gap-free; live fan-out happens in commit order.
"""
