"""Model providers behind one streaming interface (``ChatRequest`` in, provider events out) and the
registry that resolves ``provider/model`` from opencode.json.

May import: ``app.config``. The lowest layer.
"""
