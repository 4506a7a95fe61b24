"""The HTTP + SSE translators: FastAPI routers for OpenCode's legacy routes and for the V2 protocol,
their wire schemas, errors in each family's shape, and the SSE plumbing.

May import: ``app.runtime`` (through ``service.Runtime`` and the domains' facades), ``app.events``
(stream framing), ``app.providers`` (model references). Never ``app.store``. No runtime decision
lives here: a route validates, calls one runtime operation and shapes the answer.
"""
