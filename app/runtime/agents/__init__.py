"""Agents and permissions: who may do what.

Owns the agent definitions (built-in ``build``/``plan``/``general`` plus those declared in
opencode.json), the permission rules: evaluation (last match wins), ``ask`` round trips with
their replies, and the ``always`` rules saved per project; and the questions the agent asks the
user (the ``question`` tool) with their answers.

May import: the runtime kernel (``errors``, ``abort``, ``payloads``), sessions (the topology),
events, store, config.
Invariant: a reply (to a permission or a question) is taken before anything is awaited, so a
request answered once is never answered again (an abort that wins makes the reply a 404).
"""

from app.runtime.agents._definitions import Agents, Rule, tools_rules
from app.runtime.agents._domain import AgentsDomain
from app.runtime.agents._permissions import Denied, Permissions, Rejected
from app.runtime.agents._questions import QuestionRejected, Questions

__all__ = [
    "Agents",
    "AgentsDomain",
    "Denied",
    "Permissions",
    "QuestionRejected",
    "Questions",
    "Rejected",
    "Rule",
    "tools_rules",
]
