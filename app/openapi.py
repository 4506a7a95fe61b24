"""Writes the OpenAPI document to ``openapi/openapi.json`` (``python -m app.openapi``). A test
keeps the committed file equal to what the code serves at ``GET /doc``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from app.api.app import create_app
from app.settings import Settings

DOCUMENT = Path(__file__).resolve().parent.parent / "openapi" / "openapi.json"


def render() -> str:
    spec: dict[str, Any] = create_app(Settings(db=":memory:")).openapi()
    return json.dumps(spec, indent=2, sort_keys=True) + "\n"


def main() -> int:
    DOCUMENT.parent.mkdir(exist_ok=True)
    DOCUMENT.write_text(render())
    print(f"wrote {DOCUMENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
