// Tests of the client's pure parts; they need no server.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  AirlockError,
  InvalidInputError,
  NotFoundError,
  OverLimitError,
  UnauthorizedError,
  UnavailableError,
  PermissionDeniedError,
  AlreadyExistsError,
  ConflictError,
  CanceledError,
  SandboxLostError,
  argvOf,
  consumeExecStream,
  errorFromResponse,
  streamBytes,
  Sandbox,
} from "../dist/index.js";

test("error responses become the error class of their kind", () => {
  const cases = [
    [400, "invalid_input", InvalidInputError],
    [401, "unauthorized", UnauthorizedError],
    [403, "permission_denied", PermissionDeniedError],
    [404, "not_found", NotFoundError],
    [409, "already_exists", AlreadyExistsError],
    [409, "conflict", ConflictError],
    [429, "over_limit", OverLimitError],
    [499, "canceled", CanceledError],
    [503, "unavailable", UnavailableError],
    [503, "sandbox_lost", SandboxLostError],
  ];
  for (const [status, kind, C] of cases) {
    const e = errorFromResponse(status, JSON.stringify({ error: { kind, message: `m ${kind}` } }));
    assert.ok(e instanceof C, `${kind} → ${e.constructor.name}`);
    assert.ok(e instanceof AirlockError);
    assert.equal(e.kind, kind);
    assert.equal(e.status, status);
    assert.equal(e.message, `m ${kind}`);
  }
});

test("a refused transfer keeps its reason word", () => {
  const e = errorFromResponse(400, '{"error":{"kind":"invalid_input","reason":"symlink","message":"refused"}}');
  assert.equal(e.reason, "symlink");
  assert.equal(e.kind, "invalid_input");
});

test("a body that is not the error shape still gives a typed error, its kind from the status", () => {
  const e = errorFromResponse(404, "404 page not found\n");
  assert.ok(e instanceof NotFoundError);
  assert.match(e.message, /HTTP 404: 404 page not found/);
  const unknownKind = errorFromResponse(500, '{"error":{"kind":"weird","message":"x"}}');
  assert.equal(unknownKind.kind, "internal");
});

test("a string command runs by sh -c; a list is argv as is; anything else is refused", () => {
  assert.deepEqual(argvOf("echo hi"), ["sh", "-c", "echo hi"]);
  assert.deepEqual(argvOf(["python3", "-c", "print(1)"]), ["python3", "-c", "print(1)"]);
  assert.throws(() => argvOf([]), InvalidInputError);
  assert.throws(() => argvOf([1]), InvalidInputError);
});

test("streamBytes prefers the exact base64 and joins the tail on request", () => {
  assert.equal(streamBytes({ text: "héllo", bytes: 6, truncated: false }).toString(), "héllo");
  const raw = Buffer.from([0xff, 0x00, 0x80]);
  assert.deepEqual(streamBytes({ text: "\u0000", base64: raw.toString("base64"), bytes: 3, truncated: false }), raw);
  const s = { text: "head", tail: "tail", bytes: 100, truncated: true, omitted_bytes: 92 };
  assert.equal(streamBytes(s).toString(), "head");
  assert.equal(streamBytes(s, true).toString(), "headtail");
  assert.equal(streamBytes(undefined).length, 0);
});

async function* events(list) {
  for (const e of list) yield e;
}

test("an exec stream feeds the callbacks in order and returns the exit event's Result", async () => {
  const got = [];
  const result = { reason: "exited", exit_code: 3 };
  const r = await consumeExecStream(
    events([
      { type: "stdout", data_b64: Buffer.from("a").toString("base64"), offset: 0 },
      { type: "stderr", data_b64: Buffer.from("b").toString("base64"), offset: 0 },
      { type: "future_event" },
      { type: "stdout", data_b64: Buffer.from("c").toString("base64"), offset: 1 },
      { type: "exit", result },
    ]),
    { onStdout: (c) => got.push(["out", c.toString()]), onStderr: (c) => got.push(["err", c.toString()]) },
  );
  assert.deepEqual(got, [["out", "a"], ["err", "b"], ["out", "c"]]);
  assert.equal(r, result);
});

test("an exec stream's error event is thrown typed; a stream cut before exit is unavailable", async () => {
  await assert.rejects(
    consumeExecStream(events([{ type: "error", error: { kind: "not_found", message: "gone" } }]), {}),
    (e) => e instanceof NotFoundError && e.message === "gone",
  );
  await assert.rejects(consumeExecStream(events([{ type: "stdout", data_b64: "" }]), {}), UnavailableError);
});

test("a server that is not there is unavailable, with a hint", async () => {
  await assert.rejects(Sandbox.connect("sb-00000000000000000000", { socketPath: "/nonexistent/airlock.sock" }), (e) => {
    assert.ok(e instanceof UnavailableError, e.constructor.name);
    assert.match(e.message, /airlock serve/);
    return true;
  });
});

test("untar reads what tarStream writes, long and non-ASCII names included, and refuses a cut stream", async () => {
  const { tarStream, untar } = await import("../dist/tar.js");
  const files = [["a.txt", Buffer.from("a\n")], ["d/".repeat(60) + "é.txt", Buffer.from("deep")], ["empty", Buffer.alloc(0)]];
  const chunks = [];
  for await (const c of tarStream(files)) chunks.push(Buffer.from(c));
  const buf = Buffer.concat(chunks);
  assert.deepEqual(untar(buf).map((e) => [e.name, e.type, e.data.toString()]), files.map(([n, d]) => [n, "0", d.toString()]));
  assert.throws(() => untar(buf.subarray(0, 513)), /ends inside/);
  assert.throws(() => untar(buf.subarray(0, 1024)), /ends without/);
  const bad = Buffer.from(buf);
  bad[0] ^= 1;
  assert.throws(() => untar(bad), /checksum/);
});
