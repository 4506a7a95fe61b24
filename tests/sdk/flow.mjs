// End-to-end check of opensession with the official OpenCode JS SDK (@opencode-ai/sdk, V1 client).
//
//   node tests/sdk/flow.mjs http://127.0.0.1:4096
//
// Flow: subscribe to /event -> create a session -> prompt_async -> wait for message.part.delta and
// session.idle of that session -> list its messages (user + assistant "Echo: ...") -> prompt_async a
// SLOW prompt, abort it -> the assistant ends with MessageAbortedError and the session goes idle.
//
// Prints one JSON line per check on stdout ({"check": ..., "ok": true, ...}) and ends with
// {"check":"done","ok":true}. On the first failure it prints {"check": ..., "ok": false, "error": ...},
// repeats the message on stderr and exits 1. Every wait is bounded; a global watchdog exits 2.

import { createOpencodeClient } from "@opencode-ai/sdk";

import { CheckFailure, baseUrlArg, expectStatus as expectOk, fail, ok, runFlow, withTimeout } from "./harness.mjs";

const baseUrl = baseUrlArg("tests/sdk/flow.mjs");

const STEP_TIMEOUT_MS = 15_000;
const TOTAL_TIMEOUT_MS = 60_000;
const PROMPT = "hello from the OpenCode SDK";
const SLOW_PROMPT = "SLOW:2 this reply is aborted";

// -- event stream ---------------------------------------------------------------------------------

const client = createOpencodeClient({ baseUrl });
const events = [];
const listeners = new Set();
const sseErrors = [];
const streamController = new AbortController();

function waitForEvent(check, what, predicate, { from = 0, timeout = STEP_TIMEOUT_MS } = {}) {
  for (let i = from; i < events.length; i++) {
    if (predicate(events[i])) return Promise.resolve({ event: events[i], index: i });
  }
  let listener;
  const found = new Promise((resolve) => {
    listener = (event, index) => {
      if (index >= from && predicate(event)) resolve({ event, index });
    };
    listeners.add(listener);
  });
  const describeFailure = () =>
    `${what} (events so far: ${JSON.stringify(events.map((e) => e?.type))}` +
    (sseErrors.length ? `, SSE errors: ${sseErrors.join("; ")}` : "") +
    ")";
  return withTimeout(found, timeout, check, describeFailure()).catch((err) => {
    if (err instanceof CheckFailure) err.message = `timed out after ${timeout} ms waiting for ${describeFailure()}`;
    throw err;
  }).finally(() => listeners.delete(listener));
}

async function consume(stream) {
  for await (const event of stream) {
    const index = events.push(event) - 1;
    for (const listener of listeners) listener(event, index);
  }
}

// When the SDK sees no event at all, read the first raw bytes of GET /event to show why (e.g. frames
// whose lines end in "\r\n": the SDK's parser only splits events on "\n\n").
async function probeEventStream() {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 3_000);
  try {
    const response = await fetch(new URL("/event", baseUrl), { signal: controller.signal });
    const reader = response.body.getReader();
    const { value } = await reader.read();
    const raw = new TextDecoder().decode(value ?? new Uint8Array());
    return {
      request: "GET /event",
      status: response.status,
      contentType: response.headers.get("content-type"),
      firstBytes: raw.slice(0, 200),
      crlfLineEndings: raw.includes("\r\n"),
      sdkNeeds: 'events separated by "\n\n" (lines ending in "\n")',
    };
  } catch (error) {
    return { request: "GET /event", error: String(error?.message ?? error) };
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
}

const ofSession = (sessionID) => (event) => event?.properties?.sessionID === sessionID;

function textOf(message) {
  return (message.parts ?? [])
    .filter((part) => part.type === "text")
    .map((part) => part.text)
    .join("");
}

// -- the flow -------------------------------------------------------------------------------------

async function main() {
  // 1. subscribe first so no event of the session is missed.
  const subscription = await withTimeout(
    client.event.subscribe({
      signal: streamController.signal,
      sseMaxRetryAttempts: 3,
      sseDefaultRetryDelay: 200,
      onSseError: (error) => sseErrors.push(String(error?.message ?? error)),
    }),
    STEP_TIMEOUT_MS,
    "event.subscribe",
    "the SSE client",
  );
  if (!subscription?.stream) fail("event.subscribe", "client.event.subscribe() returned no stream");
  const consuming = consume(subscription.stream).catch((error) => sseErrors.push(String(error?.message ?? error)));
  const connected = await waitForEvent("event.subscribe", "server.connected", (e) => e?.type === "server.connected")
    .catch(async (error) => {
      if (error instanceof CheckFailure) error.detail = await probeEventStream();
      throw error;
    });
  ok("event.subscribe", { first: connected.event.type });

  // 2. create a session.
  const created = expectOk("session.create", await client.session.create({ body: { title: "sdk e2e" } }));
  if (typeof created?.id !== "string" || !created.id.startsWith("ses_")) {
    fail("session.create", "session id missing or not ses_...", created);
  }
  const sessionID = created.id;
  ok("session.create", { sessionID, title: created.title, directory: created.directory });

  // 3. prompt_async answers 204 at once.
  const mark = events.length;
  const admitted = await client.session.promptAsync({
    path: { id: sessionID },
    body: { parts: [{ type: "text", text: PROMPT }] },
  });
  expectOk("session.promptAsync", admitted, 204);
  ok("session.promptAsync", { status: admitted.response.status });

  // 4. deltas and idle for that session arrive on the event stream.
  const firstDelta = await waitForEvent(
    "event.message.part.delta",
    `message.part.delta of ${sessionID}`,
    (e) => e?.type === "message.part.delta" && ofSession(sessionID)(e),
    { from: mark },
  );
  const idle = await waitForEvent(
    "event.session.idle",
    `session.idle of ${sessionID}`,
    (e) => e?.type === "session.idle" && ofSession(sessionID)(e),
    { from: mark },
  );
  const deltas = events
    .slice(mark, idle.index)
    .filter((e) => e?.type === "message.part.delta" && ofSession(sessionID)(e));
  const streamed = deltas.filter((e) => e.properties.field === "text").map((e) => e.properties.delta).join("");
  if (!streamed.startsWith("Echo: ")) {
    fail("event.message.part.delta", `text deltas should spell "Echo: ...", got ${JSON.stringify(streamed)}`,
      deltas.map((e) => e.properties));
  }
  for (const key of ["sessionID", "messageID", "partID", "field", "delta"]) {
    if (typeof firstDelta.event.properties[key] !== "string") {
      fail("event.message.part.delta", `delta property ${key} missing or not a string`, firstDelta.event);
    }
  }
  ok("event.message.part.delta", { count: deltas.length, text: streamed });
  ok("event.session.idle", { sessionID });

  // 5. messages: user then assistant, with the echoed text.
  const messages = expectOk("session.messages", await client.session.messages({ path: { id: sessionID } }));
  if (!Array.isArray(messages)) fail("session.messages", "expected an array of {info, parts}", messages);
  const user = messages.find((m) => m?.info?.role === "user");
  const assistant = messages.find((m) => m?.info?.role === "assistant");
  if (!user || textOf(user) !== PROMPT) fail("session.messages", "user message with the prompt text missing", messages);
  if (!assistant || textOf(assistant) !== `Echo: ${PROMPT}`) {
    fail("session.messages", `assistant message with "Echo: ${PROMPT}" missing`, messages);
  }
  if (assistant.info.parentID !== user.info.id) {
    fail("session.messages", "assistant.parentID should be the user message id", assistant.info);
  }
  if (assistant.info.error) fail("session.messages", "assistant of a normal prompt has an error", assistant.info);
  if (!assistant.info.time?.completed) fail("session.messages", "assistant has no time.completed", assistant.info);
  ok("session.messages", {
    count: messages.length,
    roles: messages.map((m) => m.info.role),
    assistantText: textOf(assistant),
  });

  // 6. abort a slow prompt.
  const abortMark = events.length;
  expectOk(
    "session.abort",
    await client.session.promptAsync({
      path: { id: sessionID },
      body: { parts: [{ type: "text", text: SLOW_PROMPT }] },
    }),
    204,
  );
  await waitForEvent(
    "session.abort",
    `session.status busy of ${sessionID}`,
    (e) => e?.type === "session.status" && ofSession(sessionID)(e) && e.properties.status?.type === "busy",
    { from: abortMark },
  );
  await waitForEvent(
    "session.abort",
    `message.updated of the slow prompt's assistant in ${sessionID}`,
    (e) =>
      e?.type === "message.updated" &&
      e.properties?.info?.sessionID === sessionID &&
      e.properties.info.role === "assistant",
    { from: abortMark },
  );
  const aborted = expectOk("session.abort", await client.session.abort({ path: { id: sessionID } }));
  if (aborted !== true) fail("session.abort", "abort should answer true", aborted);
  const abortedAt = Date.now();
  await waitForEvent(
    "session.abort",
    `session.idle of ${sessionID} after abort`,
    (e) => e?.type === "session.idle" && ofSession(sessionID)(e),
    { from: abortMark, timeout: 5_000 },
  );
  const idleAfterMs = Date.now() - abortedAt;
  const after = expectOk("session.abort", await client.session.messages({ path: { id: sessionID } }));
  const last = after[after.length - 1];
  if (last?.info?.role !== "assistant") fail("session.abort", "last message should be the aborted assistant", after);
  if (last.info.error?.name !== "MessageAbortedError") {
    fail("session.abort", `assistant error should be MessageAbortedError, got ${JSON.stringify(last.info.error)}`,
      last.info);
  }
  if (textOf(last) === `Echo: ${SLOW_PROMPT}`) fail("session.abort", "the slow reply was not cut short", last);
  const statuses = expectOk("session.status", await client.session.status());
  const status = statuses?.[sessionID];
  if (status !== undefined && status?.type !== "idle") {
    fail("session.status", `session should be idle after abort, got ${JSON.stringify(status)}`, statuses);
  }
  ok("session.abort", { error: last.info.error.name, idleAfterMs, status: status?.type ?? "idle (absent)" });

  ok("done");
}

await runFlow(main, {
  label: "sdk flow",
  totalTimeoutMs: TOTAL_TIMEOUT_MS,
  cleanup: () => streamController.abort(),
});
