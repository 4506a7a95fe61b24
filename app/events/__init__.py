"""Events: the model, the bounded live bus and the durable log (append with projection in one
transaction, fan-out after commit, replay by cursor).

May import: ``app.store``. Invariant: per-session ``seq`` is allocated inside the write
transaction and stays gap-free; live fan-out happens in commit order.
"""
