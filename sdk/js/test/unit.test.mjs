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

// A stand-in for airlock serve's POST …/files/read at the HTTP boundary:
// the files it holds are accepted, the rest not_found, a path named twice
// refused duplicate, as the server answers.
async function fakeFilesRead(files) {
  const { createServer } = await import("node:http");
  const { tarStream } = await import("../dist/tar.js");
  const requests = [];
  const srv = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const { paths } = JSON.parse(Buffer.concat(chunks).toString());
    requests.push(paths);
    const entries = [];
    const seen = new Set();
    const transfers = paths.map((p) => {
      const a = p.startsWith("/") ? p : "/home/user/" + p;
      const rec = { direction: "download", path: p, size: 0, decision: "refused" };
      if (seen.has(a)) rec.reason = "duplicate";
      else if (files[a]) {
        entries.push([a.slice(1), Buffer.from(files[a])]);
        Object.assign(rec, { size: files[a].length, decision: "accepted" });
      } else rec.reason = "not_found";
      seen.add(a);
      return rec;
    });
    entries.push([".airlock-report.json", Buffer.from(JSON.stringify({ transfers, summary: {} }))]);
    res.writeHead(200, { "content-type": "application/x-tar" });
    tarStream(entries).pipe(res);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${srv.address().port}`, requests, close: () => srv.close() };
}

test("readMany: one request, one result per input in input order, a path given twice read once", async () => {
  const { Files, Transport, READ_MANY_MAX } = await import("../dist/index.js");
  const long = "/home/user/" + "d/".repeat(60) + "é.txt";
  const fake = await fakeFilesRead({ "/home/user/a.txt": "a\n", "/tmp/b.csv": "x,y\n", [long]: "deep" });
  try {
    const files = new Files(new Transport({ url: fake.url, token: "t" }), "sb-x");
    const paths = ["/tmp/b.csv", "missing.txt", "a.txt", long, "/home/user/a.txt", "/tmp/b.csv"];
    const got = await files.readMany(paths);
    assert.deepEqual(
      got.map((r) => [r.path, r.decision, r.reason ?? null, r.content?.toString() ?? null]),
      [
        ["/tmp/b.csv", "accepted", null, "x,y\n"],
        ["missing.txt", "refused", "not_found", null],
        ["a.txt", "accepted", null, "a\n"],
        [long, "accepted", null, "deep"],
        ["/home/user/a.txt", "accepted", null, "a\n"],
        ["/tmp/b.csv", "accepted", null, "x,y\n"],
      ],
    );
    assert.deepEqual(fake.requests, [["/tmp/b.csv", "missing.txt", "a.txt", long]]);
    assert.deepEqual(await files.readMany([]), []);
    // More paths than one request takes go in several.
    fake.requests.length = 0;
    const many = Array.from({ length: READ_MANY_MAX }, (_, i) => `/tmp/f${i}.txt`).concat(["/tmp/b.csv"]);
    const all = await files.readMany(many);
    assert.deepEqual(fake.requests.map((r) => r.length), [READ_MANY_MAX, 1]);
    assert.equal(all.at(-1).content.toString(), "x,y\n");
    assert.ok(all.slice(0, -1).every((r) => r.reason === "not_found"));
  } finally {
    fake.close();
  }
});
