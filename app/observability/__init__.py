"""What a team running the server sees of it: Prometheus metrics (``metrics``), structured logs
with request and session ids (``logs``) and OpenTelemetry traces of turns (``tracing``).

Beside the layers (like ``app/settings.py``): any layer records through the narrow interfaces
here, none imports ``prometheus_client`` or OpenTelemetry itself. Both libraries are imported only
when they are switched on (``--metrics``, the ``OTEL_*`` variables), so start-up time does not
grow for a server that uses neither.

Owns: the metric objects and their bounded labels, the logging format and its context, the tracer.
May import: the standard library, ``app.settings``, ``app.jsonutil``; nothing of the layers.
"""
