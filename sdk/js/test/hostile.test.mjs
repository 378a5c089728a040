// The client against a hostile or failing server, at the HTTP and
// WebSocket boundary (loopback fakes; they need no server). Whatever the
// server or the connection does, the caller gets a typed AirlockError.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { spawnSync } from "node:child_process";
import { WebSocketServer } from "ws";
import { AirlockError, Files, Sandbox, Transport, consumeExecStream } from "../dist/index.js";
import { tarStream } from "../dist/tar.js";

const dist = new URL("../dist/index.js", import.meta.url).href;
const wsMod = import.meta.resolve("ws").replace(/index\.js$/, "wrapper.mjs");

async function listen(srv) {
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${srv.address().port}`;
}

function stop(srv) {
  srv.closeAllConnections?.();
  srv.close();
}

/** Asserts e is an AirlockError of that kind; for assert.rejects. */
const kind = (k) => (e) => {
  assert.ok(e instanceof AirlockError, `${e.constructor.name}: ${e.message}`);
  assert.equal(e.kind, k, e.message);
  return true;
};

// Runs, in a child process, a spawn against a fake exec WebSocket that
// answers execute with started and then message, and returns how
// h.result settled. A child, because the failure this guards against is
// an uncaught exception in ws's handler, which ends the whole process.
function spawnAgainst(message, onStdout = "() => {}") {
  const script = `
    import http from "node:http";
    import { WebSocketServer } from ${JSON.stringify(wsMod)};
    import { Sandbox } from ${JSON.stringify(dist)};
    const srv = http.createServer((req, res) => res.end('{"id":"sb-x"}'));
    new WebSocketServer({ server: srv }).on("connection", (ws) => ws.once("message", () => {
      ws.send(JSON.stringify({ type: "started", exec_id: "e1", max_message_bytes: 1 << 20 }));
      ws.send(${JSON.stringify(message)});
    }));
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    const sb = await Sandbox.connect("sb-x", { url: "http://127.0.0.1:" + srv.address().port, token: "t" });
    try { await sb.spawn("true", { onStdout: ${onStdout} }).result; console.log("resolved"); }
    catch (e) { console.log("rejected " + e.constructor.name + " " + e.message); }
    process.exit(0);`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 20_000 });
  assert.equal(r.status, 0, `the process died: ${r.stderr.split("\n").find((l) => /Error/.test(l))}`);
  return r.stdout.trim();
}

test("an exec WebSocket message that is not a JSON object rejects the exec with InternalError; the process lives", { timeout: 60_000 }, () => {
  for (const message of ["null", "5", "[1]", '"text"']) {
    assert.match(spawnAgainst(message), /^rejected InternalError/, `message ${message}`);
  }
});

test("an exec WebSocket output event whose data_b64 is not base64 text rejects the exec with InternalError; the process lives", { timeout: 60_000 }, () => {
  for (const data_b64 of [5, null, undefined, "a", "!!!!"]) {
    const out = spawnAgainst(JSON.stringify({ type: "stdout", data_b64, offset: 0 }));
    assert.match(out, /^rejected InternalError/, `data_b64 ${data_b64}`);
  }
});

test("an exec WebSocket exit event with no result object, or an error event of any shape, rejects the exec typed", { timeout: 60_000 }, () => {
  assert.match(spawnAgainst(JSON.stringify({ type: "exit", result: 5 })), /^rejected InternalError/);
  assert.match(spawnAgainst(JSON.stringify({ type: "error", error: "boom" })), /^rejected InternalError the exec failed/);
  assert.match(spawnAgainst(JSON.stringify({ type: "error", error: { kind: ["x"], message: 5 } })), /^rejected InternalError/);
});

test("a spawn's onStdout that throws rejects the exec with its own error; the process lives", { timeout: 30_000 }, () => {
  const out = spawnAgainst(JSON.stringify({ type: "stdout", data_b64: "aGkK", offset: 0 }), '() => { throw new RangeError("mine"); }');
  assert.equal(out, "rejected RangeError mine");
});

test("spawn's write() splits its data into input messages within the server's max_message_bytes, before and after started", { timeout: 30_000 }, async () => {
  const LIMIT = 64 << 10; // announced in started; airlock serve says 1 MiB
  const sizes = [];
  const got = [];
  const srv = http.createServer((req, res) => res.end('{"id":"sb-x"}'));
  new WebSocketServer({ server: srv }).on("connection", (ws) => {
    let first = true;
    ws.on("message", (data) => {
      if (first) {
        first = false;
        // Late, so that the first write() is queued before the limit is known.
        setTimeout(() => ws.send(JSON.stringify({ type: "started", exec_id: "e1", max_message_bytes: LIMIT })), 100);
        return;
      }
      sizes.push(data.length);
      // As airlock serve does: a message past the limit is an error, and the end.
      if (data.length > LIMIT) {
        ws.send(JSON.stringify({ type: "error", error: { kind: "invalid_input", message: `a message of ${data.length} bytes` } }));
        ws.close(1009);
        return;
      }
      const m = JSON.parse(data.toString());
      if (m.type === "input") got.push(Buffer.from(m.data_b64, "base64"));
      if (m.type === "close_stdin") ws.send(JSON.stringify({ type: "exit", result: { reason: "exited", exit_code: 0 } }));
    });
  });
  const url = await listen(srv);
  try {
    const sb = await Sandbox.connect("sb-x", { url, token: "t" });
    const h = sb.spawn("cat");
    const a = Buffer.alloc(300 << 10, 0x61);
    const b = Buffer.from(Array.from({ length: 200 << 10 }, (_, i) => i % 251));
    h.write(a); // queued until started
    await h.started();
    h.write(b);
    h.closeStdin();
    assert.equal((await h.result).reason, "exited");
    assert.ok(sizes.every((n) => n <= LIMIT), `message sizes ${sizes}`);
    assert.ok(sizes.length > 8, `message sizes ${sizes}`);
    assert.ok(Buffer.concat(got).equals(Buffer.concat([a, b])), "stdin's bytes differ from what was written");
  } finally {
    stop(srv);
  }
});

test("a spawn whose exec never starts (no upgrade answer, or no started event) fails with TimeoutError after startTimeout, and drops its connection", { timeout: 10_000 }, async () => {
  for (const silent of ["upgrade", "started"]) {
    const srv = http.createServer((req, res) => res.end('{"id":"sb-x"}'));
    const closed = new Promise((resolve) => {
      if (silent === "upgrade") srv.on("upgrade", (req, socket) => socket.on("end", resolve)); // never answered
      else new WebSocketServer({ server: srv }).on("connection", (ws) => ws.on("close", resolve)); // never says started
    });
    const url = await listen(srv);
    try {
      const sb = await Sandbox.connect("sb-x", { url, token: "t" });
      const h = sb.spawn("true", { startTimeout: 0.3 });
      await assert.rejects(h.result, (e) => kind("timeout")(e) && /startTimeout/.test(e.message) && /airlock serve/.test(e.message));
      await closed;
      for (const startTimeout of [0, -1, Infinity, NaN, "1s"]) {
        assert.throws(() => sb.spawn("true", { startTimeout }), kind("invalid_input"), `startTimeout ${startTimeout}`);
      }
    } finally {
      stop(srv);
    }
  }
});

test("a connection dropped inside a JSON answer or a file read is UnavailableError", { timeout: 30_000 }, async () => {
  const srv = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { "content-type": "application/json", "content-length": "100" });
    res.write('{"id":"sb-x"');
    setTimeout(() => res.socket.destroy(), 50);
  });
  const url = await listen(srv);
  try {
    const t = new Transport({ url, token: "t" });
    await assert.rejects(t.json("GET", "/v1/sandboxes/sb-x"), kind("unavailable"));
    await assert.rejects(new Files(t, "sb-x").read("a.txt"), kind("unavailable"));
  } finally {
    stop(srv);
  }
});

test("an error answer whose body is cut is still the typed error of its status", { timeout: 30_000 }, async () => {
  const srv = http.createServer((req, res) => {
    req.resume();
    res.writeHead(404, { "content-type": "application/json", "content-length": "100" });
    res.write('{"error":');
    setTimeout(() => res.socket.destroy(), 50);
  });
  const url = await listen(srv);
  try {
    await assert.rejects(new Transport({ url, token: "t" }).json("GET", "/v1/sandboxes/sb-x"), kind("not_found"));
  } finally {
    stop(srv);
  }
});

test("an exec stream cut by a dropped connection is UnavailableError, as one that ends cleanly before exit is", { timeout: 30_000 }, async () => {
  const srv = http.createServer((req, res) => {
    req.resume();
    if (req.method === "GET") return res.end('{"id":"sb-x"}');
    res.writeHead(200, { "content-type": "application/x-ndjson" });
    res.write('{"type":"stdout","data_b64":"aGkK","offset":0}\n');
    setTimeout(() => res.socket.destroy(), 50);
  });
  const url = await listen(srv);
  try {
    const sb = await Sandbox.connect("sb-x", { url, token: "t" });
    await assert.rejects(sb.exec("echo hi", { onStdout: () => {} }), kind("unavailable"));
  } finally {
    stop(srv);
  }
});

test("the caller's signal aborting a read after the answer's headers is TimeoutError, as before them", { timeout: 30_000 }, async () => {
  const srv = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { "content-length": "100" });
    res.write("abc"); // and then nothing
  });
  const url = await listen(srv);
  try {
    const files = new Files(new Transport({ url, token: "t" }), "sb-x");
    await assert.rejects(files.read("a.txt", { signal: AbortSignal.abort() }), kind("timeout"));
    await assert.rejects(files.read("a.txt", { signal: AbortSignal.timeout(200) }), kind("timeout"));
  } finally {
    stop(srv);
  }
});

test("an exec stream's output event that is not base64 text, or an exit with no result object, is InternalError", async () => {
  async function* events(...evs) {
    yield* evs;
  }
  for (const ev of [{ type: "stdout", data_b64: 5 }, { type: "stderr", data_b64: "a" }, { type: "exit", result: "done" }]) {
    await assert.rejects(consumeExecStream(events(ev), {}), kind("internal"), JSON.stringify(ev));
  }
  await assert.rejects(consumeExecStream(events({ type: "error", error: "boom" }), {}), kind("internal"));
});

// A files/read answer: the tar of entries then the report, or raw bytes.
async function readServer(entries, report) {
  const srv = http.createServer(async (req, res) => {
    for await (const _ of req);
    res.writeHead(200, { "content-type": "application/x-tar" });
    if (Buffer.isBuffer(entries)) return res.end(entries);
    tarStream([...entries, [".airlock-report.json", Buffer.from(report)]]).pipe(res);
  });
  return { srv, url: await listen(srv) };
}

test("readMany with a report that is not JSON, not a list of records, or of the wrong length is InternalError", { timeout: 30_000 }, async () => {
  const rec = '{"direction":"download","path":"/home/user/a.txt","size":0,"decision":"refused","reason":"not_found"}';
  for (const report of ["not json", "[]", "null", '{"summary":{}}', '{"transfers":{},"summary":{}}', '{"transfers":[null],"summary":{}}', `{"transfers":[${rec},${rec}],"summary":{}}`]) {
    const { srv, url } = await readServer([], report);
    try {
      const files = new Files(new Transport({ url, token: "t" }), "sb-x");
      await assert.rejects(files.readMany(["/home/user/a.txt"]), kind("internal"), `report ${report}`);
    } finally {
      stop(srv);
    }
  }
});

// A ustar header of a given type flag, with a link name.
function header(name, size, type, link = "") {
  const h = Buffer.alloc(512);
  h.write(name, 0);
  h.write("0000644\0", 100);
  h.write(size.toString(8).padStart(11, "0") + "\0", 124);
  h.write("        ", 148);
  h.write(type, 156);
  h.write(link, 157);
  h.write("ustar\0", 257);
  h.write("00", 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
  return h;
}

test("readMany takes only a regular file's entry as an accepted path's content: a symlink entry is InternalError (as in Python)", { timeout: 30_000 }, async () => {
  const report = Buffer.from(JSON.stringify({ transfers: [{ direction: "download", path: "/home/user/a.txt", size: 4, decision: "accepted" }], summary: {} }));
  const pad = (b) => Buffer.concat([b, Buffer.alloc((512 - (b.length % 512)) % 512)]);
  const tar = Buffer.concat([
    header("home/user/a.txt", 0, "2", "/etc/passwd"),
    header(".airlock-report.json", report.length, "0"),
    pad(report),
    Buffer.alloc(1024),
  ]);
  const { srv, url } = await readServer(tar);
  try {
    const files = new Files(new Transport({ url, token: "t" }), "sb-x");
    await assert.rejects(files.readMany(["/home/user/a.txt"]), (e) => kind("internal")(e) && /no entry in the stream/.test(e.message));
  } finally {
    stop(srv);
  }
});
