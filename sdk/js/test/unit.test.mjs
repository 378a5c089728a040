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

// A ustar header as a hostile server could write it; size is a number
// (octal) or the 12 raw bytes of the size field.
function tarHeader(name, size, type) {
  const h = Buffer.alloc(512);
  h.write(name, 0);
  h.write("0000644\0", 100);
  if (typeof size === "number") h.write(size.toString(8).padStart(11, "0") + "\0", 124);
  else size.copy(h, 124);
  h.write("        ", 148);
  h.write(type, 156);
  h.write("ustar\0", 257);
  h.write("00", 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
  return h;
}

function paxEntry(record) {
  const data = Buffer.alloc(512);
  data.write(record);
  return Buffer.concat([tarHeader("PaxHeader", Buffer.byteLength(record), "x"), data]);
}

test("untar refuses a size that is negative, huge or not a number, naming the entry, and never loops", { timeout: 30_000 }, async () => {
  const { Worker } = await import("node:worker_threads");
  const end = Buffer.alloc(1024);
  const base256 = (first, rest) => Buffer.concat([Buffer.from([first]), Buffer.alloc(11, rest)]);
  const cases = {
    // Sends the reader back to byte 0 each lap: a loop without end that fills memory.
    paxNegative: Buffer.concat([paxEntry("14 size=-1536\n"), tarHeader("f", 0, "0"), end]),
    paxNotANumber: Buffer.concat([paxEntry("12 size=1e3\n"), tarHeader("f", 0, "0"), end]),
    paxUnsafe: Buffer.concat([paxEntry("30 size=99999999999999999999\n"), tarHeader("f", 0, "0"), end]),
    base256Negative: Buffer.concat([tarHeader("f", base256(0xff, 0xff), "0"), end]),
    base256Huge: Buffer.concat([tarHeader("f", base256(0x80, 0xff), "0"), end]),
    octalGarbage: Buffer.concat([tarHeader("f", Buffer.from("-0000003000\0"), "0"), end]),
    // A whole base-256 size still reads.
    base256Two: Buffer.concat([tarHeader("f", Buffer.from([0x80, ...Array(10).fill(0), 2]), "0"), Buffer.from("hi"), Buffer.alloc(510), end]),
  };
  // In a worker with little memory, so that a loop fails the test instead of hanging it.
  const code = `
    const { parentPort, workerData } = require("node:worker_threads");
    import(workerData.tar).then(({ untar }) => {
      const out = {};
      for (const [k, b] of Object.entries(workerData.cases)) {
        try { out[k] = untar(Buffer.from(b)).map((e) => [e.name, e.data.toString()]); } catch (e) { out[k] = e.message; }
      }
      parentPort.postMessage(out);
    });`;
  const w = new Worker(code, {
    eval: true,
    workerData: { tar: new URL("../dist/tar.js", import.meta.url).href, cases },
    resourceLimits: { maxOldGenerationSizeMb: 64 },
  });
  const got = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      w.terminate();
      reject(new Error("untar did not return within 10s"));
    }, 10_000);
    w.once("message", (m) => {
      clearTimeout(timer);
      w.terminate();
      resolve(m);
    });
    w.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
  for (const k of Object.keys(cases).filter((k) => k !== "base256Two")) {
    assert.equal(typeof got[k], "string", `${k}: ${JSON.stringify(got[k])}`);
    assert.match(got[k], /entry "f" at byte \d+ has a size that is not a whole number.*the server's tar stream is malformed/, k);
  }
  assert.deepEqual(got.base256Two, [["f", "hi"]]);
});

test("ndjson cuts lines as bytes across chunks, multi-byte characters and CRLF included", async () => {
  const { ndjson } = await import("../dist/transport.js");
  const { Readable } = await import("node:stream");
  const text = Buffer.from('{"a":"é€"}\r\n\n{"b":1}\n{"c":2}\n{"d":"last"}');
  // Every cut of the stream into two chunks, one inside each multi-byte character among them.
  for (let i = 0; i <= text.length; i++) {
    const got = [];
    for await (const v of ndjson(Readable.from([text.subarray(0, i), text.subarray(i)]))) got.push(v);
    assert.deepEqual(got, [{ a: "é€" }, { b: 1 }, { c: 2 }, { d: "last" }], `cut at ${i}`);
  }
});

test("ndjson refuses a line past its cap without reading the rest", async () => {
  const { ndjson } = await import("../dist/transport.js");
  const { Readable } = await import("node:stream");
  let pulled = 0;
  function* chunks() {
    yield Buffer.from('{"type":"stdout","data_b64":""}\n{"type":"stdout","data_b64":"');
    for (; pulled < 1024; pulled++) yield Buffer.alloc(4096, 0x41); // 4 MiB of one line
    yield Buffer.from('"}\n');
  }
  const got = [];
  await assert.rejects(
    (async () => {
      for await (const v of ndjson(Readable.from(chunks()), 1 << 20)) got.push(v);
    })(),
    (e) => e.kind === "internal" && /line past 1 MiB with no end.*maxJsonBytes/.test(e.message),
  );
  assert.equal(got.length, 1);
  assert.ok(pulled < 300, `read ${pulled} chunks of 4 KiB past a cap of 1 MiB`);
});

test("ndjson reads one long line in many small chunks in linear time", { timeout: 30_000 }, async () => {
  // The whole line was rescanned for its newline at each chunk: quadratic.
  const { ndjson } = await import("../dist/transport.js");
  const { Readable } = await import("node:stream");
  const n = 1 << 17;
  async function* chunks() {
    yield Buffer.from('{"data_b64":"');
    const piece = Buffer.alloc(16, 0x41);
    for (let i = 0; i < n; i++) {
      // Let the test's timeout fire, should this take too long.
      if (i % 4096 === 0) await new Promise((r) => setImmediate(r));
      yield piece;
    }
    yield Buffer.from('"}\n');
  }
  const got = [];
  for await (const v of ndjson(Readable.from(chunks()))) got.push(v);
  assert.equal(got.length, 1);
  assert.equal(got[0].data_b64.length, 16 * n);
});

// A stand-in for a hostile airlock serve at the HTTP boundary: handle
// answers each request; ended records, per request, whether the server
// got to the end of its answer before the client hung up.
async function fakeServer(handle) {
  const { createServer } = await import("node:http");
  const ended = [];
  const srv = createServer((req, res) => {
    req.resume();
    res.on("close", () => ended.push(res.writableEnded));
    handle(req, res);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    ended,
    // Polls until the server has seen n answers close.
    closed: async (n) => {
      while (ended.length < n) await new Promise((r) => setTimeout(r, 10));
    },
    close: () => {
      srv.closeAllConnections();
      srv.close();
    },
  };
}

// Writes head, then 128 MiB of fill as the client reads it, then tail: far
// more than loopback's socket buffers (up to 32 MiB here) hold, so that
// the answer ends only if the client reads it all.
const PUMPED = 128 << 20;
function pump(res, head, fill, tail = "") {
  const chunk = Buffer.alloc(64 << 10, fill);
  let sent = 0;
  res.write(head);
  const go = () => {
    while (sent < PUMPED) {
      sent += chunk.length;
      if (!res.write(chunk)) return res.once("drain", go);
    }
    res.end(tail);
  };
  go();
}

test("an exec's NDJSON line past maxJsonBytes is refused, and the stream dropped", { timeout: 30_000 }, async () => {
  const { Sandbox } = await import("../dist/index.js");
  const fake = await fakeServer((req, res) => {
    if (req.method === "GET") return res.end('{"id":"sb-x"}');
    res.setHeader("content-type", "application/x-ndjson");
    pump(res, '{"type":"stdout","data_b64":"', 0x41, '"}\n'); // one line of 128 MiB
  });
  try {
    const sb = await Sandbox.connect("sb-x", { url: fake.url, token: "t", maxJsonBytes: 1 << 20 });
    await assert.rejects(sb.exec("true", { onStdout: () => {} }), (e) => e.kind === "internal" && /line past 1 MiB with no end.*maxJsonBytes/.test(e.message));
    await fake.closed(2);
    assert.deepEqual(fake.ended, [true, false]);
  } finally {
    fake.close();
  }
});

test("a JSON answer past maxJsonBytes is refused: by its Content-Length before its body, else as it arrives", { timeout: 30_000 }, async () => {
  const { Sandbox, Transport, DEFAULT_MAX_JSON_BYTES } = await import("../dist/index.js");
  assert.equal(DEFAULT_MAX_JSON_BYTES, 64 << 20);
  assert.equal(new Transport({ url: "http://127.0.0.1:1" }).maxJsonBytes, DEFAULT_MAX_JSON_BYTES);
  assert.throws(() => new Transport({ url: "http://127.0.0.1:1", maxJsonBytes: -1 }), InvalidInputError);
  const fake = await fakeServer((req, res) => {
    res.setHeader("content-type", "application/json");
    const id = req.url.split("/").at(-1);
    if (id === "declared") {
      // Says 128 MiB and sends nothing: only the header can end this.
      res.setHeader("content-length", String(PUMPED));
      return res.flushHeaders();
    }
    if (id === "small") return res.end(`{"id":"${"a".repeat(4 << 20)}"}`);
    pump(res, '{"id":"', 0x61, '"}');
  });
  try {
    const conn = { url: fake.url, token: "t", maxJsonBytes: 1 << 20 };
    const check = (e) => e.kind === "internal" && /passes 1 MiB, the most this client takes \(maxJsonBytes\)/.test(e.message);
    await assert.rejects(Sandbox.connect("sb-x", conn), check);
    await assert.rejects(Sandbox.connect("declared", conn), check);
    await fake.closed(2);
    assert.deepEqual(fake.ended, [false, false]);
    // Under the cap, an answer reads.
    const sb = await Sandbox.connect("small", { ...conn, maxJsonBytes: 8 << 20 });
    assert.equal((await sb.info()).id.length, 4 << 20);
  } finally {
    fake.close();
  }
});

test("an error answer's body is read up to 1 MiB: still a typed error, and the rest never read", { timeout: 30_000 }, async () => {
  const { Sandbox } = await import("../dist/index.js");
  const fake = await fakeServer((req, res) => {
    res.statusCode = 404;
    pump(res, "", 0x62);
  });
  try {
    await assert.rejects(Sandbox.connect("sb-x", { url: fake.url, token: "t" }), (e) => {
      assert.ok(e instanceof NotFoundError, e.constructor.name);
      assert.match(e.message, /^airlock server answered HTTP 404: b{500}$/);
      return true;
    });
    await fake.closed(1);
    assert.deepEqual(fake.ended, [false]);
  } finally {
    fake.close();
  }
});

test("a file read past maxReadBytes is refused: Files.read by Content-Length or as it arrives, readMany's tar as it arrives", { timeout: 30_000 }, async () => {
  const { Files, Transport, DEFAULT_MAX_READ_BYTES } = await import("../dist/index.js");
  assert.equal(DEFAULT_MAX_READ_BYTES, 1 << 30);
  const fake = await fakeServer((req, res) => {
    if (req.method === "POST") return pump(res, tarHeader("home/user/a.txt", PUMPED, "0"), 0x63);
    const path = new URL(req.url, "http://x").searchParams.get("path");
    if (path === "declared") {
      res.setHeader("content-length", String(PUMPED));
      return res.flushHeaders();
    }
    if (path === "small") return res.end(Buffer.alloc(2 << 20, 0x63));
    pump(res, "", 0x63); // chunked: no Content-Length
  });
  try {
    const files = new Files(new Transport({ url: fake.url, token: "t", maxReadBytes: 1 << 20 }), "sb-x");
    const check = (e) => e.kind === "internal" && /passes 1 MiB, the most this client takes \(maxReadBytes\)/.test(e.message);
    await assert.rejects(files.read("chunked"), check);
    await assert.rejects(files.read("declared"), check);
    await assert.rejects(files.readMany(["a.txt"]), check);
    await fake.closed(3);
    assert.deepEqual(fake.ended, [false, false, false]);
    const roomy = new Files(new Transport({ url: fake.url, token: "t", maxReadBytes: 4 << 20 }), "sb-x");
    assert.equal((await roomy.read("small")).length, 2 << 20);
  } finally {
    fake.close();
  }
});

test("a refused exec WebSocket's error body is read up to 1 MiB: still a typed error, and the rest never read", { timeout: 30_000 }, async () => {
  const { Sandbox } = await import("../dist/index.js");
  const fake = await fakeServer((req, res) => {
    if (!req.url.endsWith("/exec/ws")) return res.end('{"id":"sb-x"}');
    res.statusCode = 404;
    pump(res, "", 0x62);
  });
  try {
    const sb = await Sandbox.connect("sb-x", { url: fake.url, token: "t" });
    await assert.rejects(sb.spawn("true").result, (e) => {
      assert.ok(e instanceof NotFoundError, e.constructor.name);
      assert.match(e.message, /^airlock server answered HTTP 404: b{500}$/);
      return true;
    });
    await fake.closed(2);
    assert.deepEqual(fake.ended, [true, false]);
  } finally {
    fake.close();
  }
});
