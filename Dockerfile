FROM python:3.11-slim

RUN apt-get update && apt-get install -y --no-install-recommends git && rm -rf /var/lib/apt/lists/*
WORKDIR /srv/opensession
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY migrations ./migrations
RUN pip install --no-cache-dir ".[otel]"

RUN useradd --create-home --uid 1000 opensession && mkdir -p /data /workspace && chown opensession /data /workspace
USER opensession
# The data directory (the SQLite file below, saved provider keys, worktrees, a lone process's step
# snapshots) and the global configuration (opencode.json, agents, commands: what PATCH
# /global/config changes) on the volume, not in the container's home, where a new container would
# lose them and replicas sharing the volume would each have their own.
ENV OPENSESSION_DATA_DIR=/data
ENV OPENSESSION_CONFIG_DIR=/data/config
VOLUME ["/data"]
EXPOSE 4096
# A public bind requires OPENCODE_SERVER_PASSWORD (basic auth); the server refuses to start otherwise.
CMD ["opensession", "serve", "--hostname", "0.0.0.0", "--port", "4096", "--db", "/data/opensession.db", "--directory", "/workspace"]
