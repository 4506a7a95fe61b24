// End-to-end check of opensession's V2 API (/api/...) with the official OpenCode JS SDK's V2 client
// (@opencode-ai/sdk/v2, `client.v2.*`).
//
//   node tests/sdk/flow_v2.mjs http://127.0.0.1:4096
//
// Flow: v2.session.create -> v2.session.prompt with a client-chosen message id -> the same prompt
// again returns the same admission record -> a different body under that id is a 409 ConflictError ->
// v2.session.wait -> v2.session.messages (newest first: assistant "Echo: ..." then the user message)
// -> v2.session.history (durable events, seq strictly increasing from 0, paged with after/limit) ->
// v2.session.events from after=0 until session.next.step.ended (same events as the history) -> a SLOW
// prompt, v2.session.active lists it, v2.session.interrupt -> the session leaves active and its last
// assistant message ends in failure -> v2.integration.list, then a key connected
// (v2.integration.connect.key), renamed (v2.credential.update) and removed (v2.credential.remove).
//
// Prints one JSON line per check on stdout ({"check": ..., "ok": true, ...}) and ends with
// {"check":"done","ok":true}. On the first failure it prints {"check": ..., "ok": false, "error": ...,
// "detail": ...}, repeats the message on stderr and exits 1. Every request and wait is bounded; a
// global watchdog exits 2.

import { randomBytes } from "node:crypto";
import { isDeepStrictEqual } from "node:util";

import { createOpencodeClient } from "@opencode-ai/sdk/v2";

import {
  CheckFailure, baseUrlArg, describe as describeResult, expectStatus as expectResultStatus, fail, ok, runFlow, sleep, withTimeout,
} from "./harness.mjs";

const baseUrl = baseUrlArg("tests/sdk/flow_v2.mjs");

const STEP_TIMEOUT_MS = 15_000;
const TOTAL_TIMEOUT_MS = 60_000;
const POLL_MS = 50;
const PROMPT = "hello from the OpenCode SDK v2";
const OTHER_PROMPT = "a different body under the same id";
const SLOW_PROMPT = "SLOW:2 this reply is interrupted";
const REQUIRED_HISTORY_TYPES = [
  "session.next.prompt.admitted",
  "session.next.prompted",
  "session.next.step.started",
  "session.next.text.ended",
  "session.next.step.ended",
];

// Describe an SDK result for failure messages: with the answer's content type and what was sent.
const describe = (result) => describeResult(result, { contentType: true, sentRequests });

// One SDK call, bounded twice: the request carries an abort signal and the promise a timeout.
function call(check, what, invoke, ms = STEP_TIMEOUT_MS) {
  return withTimeout(invoke({ signal: AbortSignal.timeout(ms) }), ms + 1_000, check, what);
}

const expectStatus = (check, result, status) => expectResultStatus(check, result, status, describe);

// V2 answers wrap their payload: {data: ...}.
function expectData(check, result, status = 200) {
  const body = expectStatus(check, result, status);
  if (body === null || typeof body !== "object" || !("data" in body)) {
    fail(check, "expected a JSON body {data: ...}", describe(result));
  }
  return body;
}

// OpenCode message ids: msg_ + 12 hex digits (time-ordered) + 14 base62 characters.
const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
function messageID() {
  const head = (BigInt(Date.now()) * 4096n + BigInt(randomBytes(1)[0])).toString(16).padStart(12, "0").slice(-12);
  const tail = Array.from(randomBytes(14), (byte) => BASE62[byte % 62]).join("");
  return `msg_${head}${tail}`;
}

const textOf = (message) =>
  (message?.content ?? [])
    .filter((part) => part.type === "text")
    .map((part) => part.text)
    .join("");

const seqOf = (event) => event?.durable?.seq;

// -- the flow -------------------------------------------------------------------------------------

// Remember what the SDK actually put on the wire (content type and body), for failure reports.
const sentRequests = new WeakMap();
async function recordingFetch(request) {
  const body = request.body === null ? null : await request.clone().text();
  sentRequests.set(request, { contentType: request.headers.get("content-type"), body });
  return fetch(request);
}

const client = createOpencodeClient({ baseUrl, fetch: recordingFetch });
const v2 = client.v2;
const streamControllers = [];

async function readHistory(check, sessionID) {
  const events = [];
  let after;
  for (let page = 0; page < 50; page++) {
    const body = expectData(
      check,
      await call(check, "GET /api/session/:id/history", (o) =>
        v2.session.history({ sessionID, limit: 100, ...(after === undefined ? {} : { after }) }, o),
      ),
    );
    if (!Array.isArray(body.data) || typeof body.hasMore !== "boolean") {
      fail(check, "expected {data: SessionDurableEvent[], hasMore: boolean}", body);
    }
    events.push(...body.data);
    if (!body.hasMore) return events;
    if (body.data.length === 0) fail(check, "hasMore is true but the page is empty", { after, body });
    after = seqOf(body.data[body.data.length - 1]);
  }
  fail(check, "history did not end within 50 pages", { count: events.length });
}

async function main() {
  // 1. create a session with an empty body.
  const created = expectData("v2.session.create", await call("v2.session.create", "POST /api/session", (o) =>
    v2.session.create({}, o),
  )).data;
  if (typeof created?.id !== "string" || !created.id.startsWith("ses_")) {
    fail("v2.session.create", "session id missing or not ses_...", created);
  }
  for (const key of ["projectID", "title"]) {
    if (typeof created[key] !== "string") fail("v2.session.create", `SessionV2Info.${key} missing`, created);
  }
  if (typeof created.location?.directory !== "string" || typeof created.time?.created !== "number") {
    fail("v2.session.create", "SessionV2Info.location.directory or time.created missing", created);
  }
  const sessionID = created.id;
  ok("v2.session.create", { sessionID, title: created.title, directory: created.location.directory });

  // 2. prompt with an explicit, client-chosen message id.
  const id = messageID();
  const promptBody = { sessionID, id, prompt: { text: PROMPT } };
  const first = expectData("v2.session.prompt", await call("v2.session.prompt", "POST /api/session/:id/prompt", (o) =>
    v2.session.prompt(promptBody, o),
  )).data;
  const expected = { id, sessionID, delivery: "steer" };
  for (const [key, value] of Object.entries(expected)) {
    if (first?.[key] !== value) fail("v2.session.prompt", `admitted.${key} should be ${JSON.stringify(value)}`, first);
  }
  if (first.prompt?.text !== PROMPT) fail("v2.session.prompt", "admitted.prompt.text is not the prompt", first);
  if (!Number.isInteger(first.admittedSeq) || typeof first.timeCreated !== "number") {
    fail("v2.session.prompt", "admitted.admittedSeq / timeCreated missing", first);
  }
  ok("v2.session.prompt", { id, admittedSeq: first.admittedSeq, delivery: first.delivery });

  // 3. the same prompt again answers the same admission record (promotedSeq may have appeared since:
  //    the input was promoted in between; once present it must not change).
  const again = expectData("v2.session.prompt.idempotent", await call(
    "v2.session.prompt.idempotent",
    "POST /api/session/:id/prompt (replay)",
    (o) => v2.session.prompt(promptBody, o),
  )).data;
  const { promotedSeq: firstPromoted, ...firstRest } = first;
  const { promotedSeq: againPromoted, ...againRest } = again ?? {};
  if (!isDeepStrictEqual(firstRest, againRest) || (firstPromoted !== undefined && firstPromoted !== againPromoted)) {
    fail("v2.session.prompt.idempotent", "replaying the same prompt returned a different record", { first, again });
  }
  ok("v2.session.prompt.idempotent", {
    identical: isDeepStrictEqual(first, again),
    promotedSeq: { first: firstPromoted ?? null, again: againPromoted ?? null },
  });

  // 4. a different body under the same id is a 409 ConflictError.
  const conflict = await call("v2.session.prompt.conflict", "POST /api/session/:id/prompt (conflict)", (o) =>
    v2.session.prompt({ sessionID, id, prompt: { text: OTHER_PROMPT } }, o),
  );
  if (conflict?.response?.status !== 409 || conflict.error?._tag !== "ConflictError") {
    fail("v2.session.prompt.conflict", "expected HTTP 409 {_tag: \"ConflictError\"}", describe(conflict));
  }
  if (typeof conflict.error.message !== "string" || conflict.data !== undefined) {
    fail("v2.session.prompt.conflict", "ConflictError needs a message and no data", describe(conflict));
  }
  ok("v2.session.prompt.conflict", {
    status: 409,
    tag: conflict.error._tag,
    resource: conflict.error.resource ?? null,
  });

  // 5. wait answers 204 once the session is idle.
  const waitStarted = Date.now();
  expectStatus("v2.session.wait", await call("v2.session.wait", "POST /api/session/:id/wait", (o) =>
    v2.session.wait({ sessionID }, o),
  ), 204);
  ok("v2.session.wait", { status: 204, ms: Date.now() - waitStarted });

  // 6. messages, newest first: the assistant's echo, then the user message of the prompt.
  const page = expectData("v2.session.messages", await call("v2.session.messages", "GET /api/session/:id/message", (o) =>
    v2.session.messages({ sessionID }, o),
  ));
  const messages = page.data;
  if (!Array.isArray(messages) || typeof page.cursor !== "object" || page.cursor === null) {
    fail("v2.session.messages", "expected {data: SessionMessage[], cursor: {...}}", page);
  }
  const [assistant, user] = messages;
  if (messages.length !== 2 || assistant?.type !== "assistant" || user?.type !== "user") {
    fail("v2.session.messages", "expected [assistant, user] (newest first)", messages);
  }
  if (user.id !== id || user.text !== PROMPT) {
    fail("v2.session.messages", `user message should be ${id} with the prompt text (not the conflicting body)`, user);
  }
  if (textOf(assistant) !== `Echo: ${PROMPT}`) {
    fail("v2.session.messages", `assistant text should be "Echo: ${PROMPT}"`, assistant);
  }
  if (assistant.error !== undefined || typeof assistant.time?.completed !== "number") {
    fail("v2.session.messages", "assistant of a normal prompt should be completed without error", assistant);
  }
  ok("v2.session.messages", {
    count: messages.length,
    types: messages.map((m) => m.type),
    assistantText: textOf(assistant),
    finish: assistant.finish ?? null,
  });

  // 7. history: durable events, seq strictly increasing from 0, the prompt's lifecycle in order.
  const history = await readHistory("v2.session.history", sessionID);
  const seqs = history.map(seqOf);
  if (seqs[0] !== 0) fail("v2.session.history", "the first durable event should have seq 0", history.slice(0, 3));
  for (let i = 1; i < seqs.length; i++) {
    if (!(Number.isInteger(seqs[i]) && seqs[i] > seqs[i - 1])) {
      fail("v2.session.history", `seq not strictly increasing at index ${i}`, seqs);
    }
  }
  const foreign = history.filter((e) => e?.durable?.aggregateID !== sessionID || typeof e.id !== "string");
  if (foreign.length) fail("v2.session.history", "events need an id and durable.aggregateID = session", foreign);
  const types = history.map((e) => e.type);
  const positions = REQUIRED_HISTORY_TYPES.map((type) => types.indexOf(type));
  const missing = REQUIRED_HISTORY_TYPES.filter((_, i) => positions[i] < 0);
  if (missing.length) fail("v2.session.history", `missing ${missing.join(", ")}`, types);
  if (positions.some((p, i) => i > 0 && p < positions[i - 1])) {
    fail("v2.session.history", `expected the order ${REQUIRED_HISTORY_TYPES.join(" < ")}`, types);
  }
  const admittedEvents = history.filter((e) => e.type === "session.next.prompt.admitted");
  if (admittedEvents.length !== 1 || admittedEvents[0].data?.messageID !== id) {
    fail("v2.session.history", "exactly one prompt.admitted (for the explicit id) expected", admittedEvents);
  }
  if (seqOf(admittedEvents[0]) !== first.admittedSeq) {
    fail("v2.session.history", "admitted.admittedSeq should be the seq of prompt.admitted",
      { admittedSeq: first.admittedSeq, event: admittedEvents[0] });
  }
  const prompted = history.find((e) => e.type === "session.next.prompted");
  if (againPromoted !== undefined && seqOf(prompted) !== againPromoted) {
    fail("v2.session.history", "admitted.promotedSeq should be the seq of session.next.prompted",
      { promotedSeq: againPromoted, event: prompted });
  }
  const textEnded = history.find((e) => e.type === "session.next.text.ended");
  if (textEnded.data?.text !== `Echo: ${PROMPT}`) {
    fail("v2.session.history", "session.next.text.ended should carry the echoed text", textEnded);
  }
  const stepEnded = history.find((e) => e.type === "session.next.step.ended");
  if (stepEnded.data?.assistantMessageID !== assistant.id) {
    fail("v2.session.history", "step.ended.assistantMessageID should be the assistant message", stepEnded);
  }
  // after is exclusive, limit bounds the page.
  const window = expectData("v2.session.history", await call("v2.session.history", "GET history?after=0&limit=2", (o) =>
    v2.session.history({ sessionID, after: 0, limit: 2 }, o),
  ));
  if (!isDeepStrictEqual(window.data?.map(seqOf), seqs.slice(1, 3)) || window.hasMore !== seqs.length > 3) {
    fail("v2.session.history", `history?after=0&limit=2 should return seqs ${seqs.slice(1, 3)}`, window);
  }
  ok("v2.session.history", {
    count: history.length,
    firstSeq: seqs[0],
    lastSeq: seqs[seqs.length - 1],
    types: [...new Set(types)],
  });

  // 8. the session event stream from after=0 replays the same durable events until step.ended.
  if (typeof v2.session.events !== "function") {
    ok("v2.session.events", { skipped: "this SDK has no v2.session.events" });
  } else {
    const controller = new AbortController();
    streamControllers.push(controller);
    const sseErrors = [];
    const sseIDs = [];
    const { stream } = await call("v2.session.events", "GET /api/session/:id/event", () =>
      v2.session.events({ sessionID, after: "0" }, {
        signal: controller.signal,
        sseMaxRetryAttempts: 1,
        sseDefaultRetryDelay: 200,
        onSseError: (error) => sseErrors.push(String(error?.message ?? error)),
        onSseEvent: (event) => sseIDs.push(event.id),
      }),
    );
    const streamed = [];
    const reading = (async () => {
      for await (const event of stream) {
        streamed.push(event);
        if (event?.type === "session.next.step.ended") return;
      }
    })();
    await withTimeout(reading, STEP_TIMEOUT_MS, "v2.session.events", "session.next.step.ended").catch((error) => {
      if (error instanceof CheckFailure) {
        error.detail = { received: streamed.map((e) => [seqOf(e), e?.type]), sseErrors };
      }
      throw error;
    });
    controller.abort();
    const last = streamed[streamed.length - 1];
    if (last?.type !== "session.next.step.ended") {
      fail("v2.session.events", "stream ended before session.next.step.ended",
        { received: streamed.map((e) => [seqOf(e), e?.type]), sseErrors });
    }
    const streamedSeqs = streamed.map(seqOf);
    const expectedEvents = history.filter((e) => seqOf(e) > 0 && seqOf(e) <= seqOf(last));
    if (!isDeepStrictEqual(streamed, expectedEvents)) {
      fail("v2.session.events", "the stream should replay exactly the history events after seq 0",
        { streamed: streamed.map((e) => [seqOf(e), e?.type]), history: expectedEvents.map((e) => [seqOf(e), e.type]) });
    }
    const idLines = sseIDs.slice(0, streamed.length);
    if (!isDeepStrictEqual(idLines, streamedSeqs.map(String))) {
      fail("v2.session.events", "each SSE frame's id: line should be the event's durable seq",
        { idLines, seqs: streamedSeqs });
    }
    ok("v2.session.events", {
      count: streamed.length,
      firstSeq: streamedSeqs[0],
      lastSeq: streamedSeqs[streamedSeqs.length - 1],
      idLinesAreSeqs: true,
    });
  }

  // 9. a slow prompt: active while running, interrupt, then idle with a failed assistant turn.
  const lastSeq = seqs[seqs.length - 1];
  const slow = expectData("v2.session.active", await call("v2.session.active", "POST prompt (slow)", (o) =>
    v2.session.prompt({ sessionID, prompt: { text: SLOW_PROMPT } }, o),
  )).data;
  if (typeof slow?.id !== "string" || !slow.id.startsWith("msg_") || slow.id === id) {
    fail("v2.session.active", "a prompt without id should be admitted under a new msg_ id", slow);
  }
  let running;
  let started;
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline && !(running && started)) {
    if (!running) {
      const active = expectData("v2.session.active", await call("v2.session.active", "GET /api/session/active", (o) =>
        v2.session.active(o),
      )).data;
      if (active?.[sessionID] !== undefined) running = active;
    }
    if (!started) {
      const tail = expectData("v2.session.active", await call("v2.session.active", "GET history (tail)", (o) =>
        v2.session.history({ sessionID, after: lastSeq, limit: 100 }, o),
      )).data;
      started = tail.find((e) => e.type === "session.next.step.started");
    }
    if (!(running && started)) await sleep(POLL_MS);
  }
  if (!running) fail("v2.session.active", `${sessionID} never appeared in /api/session/active within 5 s`);
  if (!started) fail("v2.session.active", "no session.next.step.started for the slow prompt within 5 s");
  if (!isDeepStrictEqual(running[sessionID], { type: "running" })) {
    fail("v2.session.active", "active entries should be {type: \"running\"}", running);
  }
  ok("v2.session.active", { sessionID, entry: running[sessionID] });

  expectStatus("v2.session.interrupt", await call("v2.session.interrupt", "POST /api/session/:id/interrupt", (o) =>
    v2.session.interrupt({ sessionID }, o),
  ), 204);
  const interruptedAt = Date.now();
  expectStatus("v2.session.interrupt", await call("v2.session.interrupt", "POST wait after interrupt", (o) =>
    v2.session.wait({ sessionID }, o), 5_000,
  ), 204);
  const idleAfterMs = Date.now() - interruptedAt;
  const activeAfter = expectData("v2.session.interrupt", await call("v2.session.interrupt", "GET active", (o) =>
    v2.session.active(o),
  )).data;
  if (activeAfter?.[sessionID] !== undefined) {
    fail("v2.session.interrupt", "the interrupted session is still listed as active", activeAfter);
  }
  const after = expectData("v2.session.interrupt", await call("v2.session.interrupt", "GET messages", (o) =>
    v2.session.messages({ sessionID }, o),
  )).data;
  const [lastAssistant, lastUser] = after;
  if (lastAssistant?.type !== "assistant" || lastUser?.type !== "user" || lastUser.id !== slow.id) {
    fail("v2.session.interrupt", "newest messages should be the slow prompt's assistant, then its user message",
      after.slice(0, 2));
  }
  const failed = lastAssistant.error !== undefined || ["error", "aborted", "interrupted", "cancelled"].includes(lastAssistant.finish);
  if (!failed) {
    fail("v2.session.interrupt", "the interrupted assistant should carry an error or a failure finish", lastAssistant);
  }
  if (textOf(lastAssistant) === `Echo: ${SLOW_PROMPT}`) {
    fail("v2.session.interrupt", "the slow reply was not cut short", lastAssistant);
  }
  const tail = expectData("v2.session.interrupt", await call("v2.session.interrupt", "GET history (tail)", (o) =>
    v2.session.history({ sessionID, after: lastSeq, limit: 100 }, o),
  )).data;
  const terminal = tail.find(
    (e) => ["session.next.step.failed", "session.next.step.ended"].includes(e.type) &&
      e.data?.assistantMessageID === lastAssistant.id,
  );
  if (!terminal) fail("v2.session.interrupt", "no step.failed/step.ended for the interrupted turn", tail.map((e) => e.type));
  // interrupting an idle session is a no-op.
  expectStatus("v2.session.interrupt", await call("v2.session.interrupt", "POST interrupt (idle)", (o) =>
    v2.session.interrupt({ sessionID }, o),
  ), 204);
  ok("v2.session.interrupt", {
    idleAfterMs,
    error: lastAssistant.error ?? null,
    finish: lastAssistant.finish ?? null,
    terminal: terminal.type,
  });

  // 8. integrations: the catalog's providers with their methods; a key connected, renamed and
  //    removed through v2.integration / v2.credential.
  const integrations = expectData("v2.integration.list", await call("v2.integration.list", "GET /api/integration", (o) =>
    v2.integration.list({}, o),
  )).data;
  const listed = Array.isArray(integrations) ? integrations.find((i) => i.id === "anthropic") : undefined;
  if (!listed?.methods?.some((m) => m.type === "key") || !Array.isArray(listed.connections)) {
    fail("v2.integration.list", "anthropic missing, or without a key method and connections", integrations);
  }
  expectStatus("v2.integration.connect.key", await call("v2.integration.connect.key", "POST connect/key", (o) =>
    v2.integration.connect.key({ integrationID: "anthropic", key: "sk-fake-sdk-flow", label: "sdk" }, o),
  ), 204);
  const connectedTo = async (what) => expectData("v2.integration.get", await call("v2.integration.get", what, (o) =>
    v2.integration.get({ integrationID: "anthropic" }, o),
  )).data?.connections?.filter((c) => c.type === "credential") ?? [];
  const [credential] = await connectedTo("GET /api/integration/anthropic");
  if (credential?.label !== "sdk" || !String(credential.id).startsWith("cred_")) {
    fail("v2.integration.connect.key", "the connected key is not listed as a credential labelled sdk", credential);
  }
  expectStatus("v2.credential.update", await call("v2.credential.update", "PATCH /api/credential/:id", (o) =>
    v2.credential.update({ credentialID: credential.id, label: "renamed" }, o),
  ), 204);
  const [renamed] = await connectedTo("GET /api/integration/anthropic (renamed)");
  if (renamed?.label !== "renamed") fail("v2.credential.update", "the label did not change", renamed);
  expectStatus("v2.credential.remove", await call("v2.credential.remove", "DELETE /api/credential/:id", (o) =>
    v2.credential.remove({ credentialID: credential.id }, o),
  ), 204);
  const left = await connectedTo("GET /api/integration/anthropic (removed)");
  if (left.length) fail("v2.credential.remove", "the credential is still listed", left);
  ok("v2.integration", { integrations: integrations.length, credential: credential.id });

  ok("done");
}

await runFlow(main, {
  label: "sdk v2 flow",
  totalTimeoutMs: TOTAL_TIMEOUT_MS,
  cleanup: () => {
    for (const controller of streamControllers) controller.abort();
  },
});
