// Shared harness of the SDK flows (flow.mjs, flow_v2.mjs): one JSON line per check on stdout, the
// first failure ends the flow, every wait is bounded and a global watchdog exits 2.
//
//   {"check": ..., "ok": true, ...}                        a passed check (ok)
//   {"check": ..., "ok": false, "error": ..., "detail": ...} the first failure (runFlow, exit 1)
//   {"check": "watchdog", "ok": false, "error": ...}        the flow took too long (exit 2)

export const emit = (record) => process.stdout.write(JSON.stringify(record) + "\n");

export class CheckFailure extends Error {
  constructor(check, message, detail) {
    super(message);
    this.check = check;
    this.detail = detail;
  }
}

export function fail(check, message, detail) {
  throw new CheckFailure(check, message, detail);
}

export function ok(check, extra = {}) {
  emit({ check, ok: true, ...extra });
}

// The server URL from the command line; without it print the usage and exit 64.
export function baseUrlArg(script) {
  const baseUrl = process.argv[2];
  if (!baseUrl) {
    console.error(`usage: node ${script} <server-url>`);
    process.exit(64);
  }
  return baseUrl;
}

export function withTimeout(promise, ms, check, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailure(check, `timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Describe an SDK result ({data, error, request, response}) for failure messages. With contentType the
// answer's content type is included; with sentRequests (a WeakMap request -> what was sent) also what
// the SDK put on the wire.
export function describe(result, { contentType = false, sentRequests } = {}) {
  const req = result?.request ? `${result.request.method} ${result.request.url}` : "?";
  const status = result?.response ? result.response.status : "no response";
  const detail = contentType
    ? { request: req, status, contentType: result?.response?.headers?.get("content-type") ?? null }
    : { request: req, status };
  detail.error = result?.error;
  detail.data = result?.data;
  const sent = result?.request && sentRequests ? sentRequests.get(result.request) : undefined;
  if (sent) detail.sent = sent;
  return detail;
}

// The data of an SDK result answered with HTTP `status` and no error; otherwise fail `check` with
// describeResult(result) as detail.
export function expectStatus(check, result, status = 200, describeResult = describe) {
  if (result?.error !== undefined || !result?.response || result.response.status !== status) {
    fail(check, `expected HTTP ${status} without error`, describeResult(result));
  }
  return result.data;
}

// Run a flow: a watchdog exits 2 after totalTimeoutMs; a failure of main() is reported as a JSON line
// and on stderr (prefixed with label, e.g. "sdk flow") and exits 1; cleanup() runs in any case; exit 0
// when main() resolves.
export async function runFlow(main, { label, totalTimeoutMs, cleanup = () => {} }) {
  const watchdog = setTimeout(() => {
    emit({ check: "watchdog", ok: false, error: `flow did not finish within ${totalTimeoutMs} ms` });
    console.error(`${label}: did not finish within ${totalTimeoutMs} ms`);
    process.exit(2);
  }, totalTimeoutMs);

  let code = 0;
  try {
    await main();
  } catch (error) {
    code = 1;
    const check = error instanceof CheckFailure ? error.check : "unexpected";
    const record = { check, ok: false, error: error?.message ?? String(error) };
    if (error?.detail !== undefined) record.detail = error.detail;
    emit(record);
    console.error(`${label} failed at ${check}: ${record.error}`);
    if (record.detail !== undefined) console.error(JSON.stringify(record.detail, null, 2));
    if (!(error instanceof CheckFailure) && error?.stack) console.error(error.stack);
  } finally {
    cleanup();
    clearTimeout(watchdog);
  }
  process.exit(code);
}
