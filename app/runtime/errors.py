"""Domain errors raised by the runtime. The HTTP layer maps each to a status and a wire body;
the runtime never knows about HTTP."""

from __future__ import annotations


class RuntimeFailure(Exception):
    """Base class: ``message`` is safe to show to a client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SessionNotFound(RuntimeFailure):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session not found: {session_id}")
        self.session_id = session_id


class MessageNotFound(RuntimeFailure):
    def __init__(self, session_id: str, message_id: str) -> None:
        super().__init__(f"Message not found: {message_id}")
        self.session_id = session_id
        self.message_id = message_id


class InvalidInput(RuntimeFailure):
    """The request is well-formed JSON but asks for something that cannot be done."""


class InputConflict(RuntimeFailure):
    def __init__(self, message_id: str) -> None:
        super().__init__(f"Prompt message ID conflicts with an existing durable record: {message_id}")
        self.message_id = message_id


class SessionBusy(RuntimeFailure):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"Session is busy: {session_id}")
        self.session_id = session_id
