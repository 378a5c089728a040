// Interactive execs over the exec WebSocket, against a live server.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { createHash } from "node:crypto";
import { NotFoundError, Sandbox, streamBytes } from "../dist/index.js";

const socketPath = process.env.AIRLOCK_SOCKET;
const url = process.env.AIRLOCK_URL;
const token = process.env.AIRLOCK_TOKEN;
if (!socketPath || !url || !token) {
  throw new Error("these tests need a live server: set AIRLOCK_SOCKET, AIRLOCK_URL and AIRLOCK_TOKEN, or run sdk/test.sh");
}

let sb;
before(async () => {
  sb = await Sandbox.create({ socketPath, ttl: "10m", idleTimeout: "5m", labels: { suite: "sdk-js" } });
});
after(async () => {
  await sb?.close();
});

/** Resolves once pred(text so far) holds. */
function waitFor(chunks, pred) {
  return new Promise((resolve) => {
    const check = () => (pred(Buffer.concat(chunks).toString()) ? resolve() : setTimeout(check, 20));
    check();
  });
}

test("spawn: stdin fed while the program runs, then closed", async () => {
  const out = [];
  const h = sb.spawn(["python3", "-u", "-c", "import sys\nfor line in sys.stdin: print('echo:', line.strip())"], { onStdout: (c) => out.push(c) });
  assert.match(await h.started(), /./);
  h.write("one\n");
  await waitFor(out, (t) => t.includes("echo: one"));
  h.write(Buffer.from("two\n"));
  await waitFor(out, (t) => t.includes("echo: two"));
  h.closeStdin();
  const r = await h.result;
  assert.equal(r.reason, "exited");
  assert.equal(r.exit_code, 0);
  assert.equal(Buffer.concat(out).toString(), "echo: one\necho: two\n");
});

test("spawn: kill ends the program, and the Result says so", async () => {
  const out = [];
  const h = sb.spawn("echo ready; exec sleep 60", { onStdout: (c) => out.push(c), stdin: false });
  await waitFor(out, (t) => t.includes("ready"));
  h.kill();
  const r = await h.result;
  assert.equal(r.reason, "killed");
});

test("spawn over TCP: a dropped connection resumes with no byte lost or repeated", async () => {
  // A loopback proxy in front of the server, whose connections the test
  // cuts mid-stream; the client reconnects through it.
  const target = new URL(url);
  const live = new Set();
  let accepted = 0;
  const proxy = net.createServer((c) => {
    accepted++;
    const s = net.connect(Number(target.port), target.hostname);
    live.add(c);
    live.add(s);
    c.pipe(s).pipe(c);
    const drop = () => {
      c.destroy();
      s.destroy();
      live.delete(c);
      live.delete(s);
    };
    c.on("error", drop).on("close", drop);
    s.on("error", drop).on("close", drop);
  });
  await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
  const proxied = await Sandbox.connect(sb.id, { url: `http://127.0.0.1:${proxy.address().port}`, token });
  try {
    // 2000 numbered lines, then a wait for a flag file, then 2000 more:
    // the second half is written while the client is disconnected.
    const cmd =
      "seq 1 2000 | sed 's/^/line /'; i=0; while [ ! -f /home/user/resume.flag ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; seq 2001 4000 | sed 's/^/line /'; seq 1 50 | sed 's/^/err /' >&2";
    const out = [];
    const err = [];
    const h = proxied.spawn(cmd, { onStdout: (c) => out.push(c), onStderr: (c) => err.push(c), stdin: false, timeout: "60s" });
    await waitFor(out, (t) => t.includes("line 2000\n"));
    for (const s of live) s.destroy();
    await sb.files.write("/home/user/resume.flag", "");
    const r = await h.result;
    const want = Array.from({ length: 4000 }, (_, i) => `line ${i + 1}\n`).join("");
    const got = Buffer.concat(out);
    assert.equal(got.toString(), want);
    assert.equal(createHash("sha256").update(got).digest("hex"), r.stdout.sha256);
    assert.equal(Buffer.concat(err).toString(), Array.from({ length: 50 }, (_, i) => `err ${i + 1}\n`).join(""));
    assert.deepEqual(streamBytes(r.stdout), got);
    assert.equal(r.reason, "exited");
    assert.ok(accepted >= 3, `the client connected ${accepted} times through the proxy: connect, exec, reconnect`);
  } finally {
    proxy.close();
    for (const s of live) s.destroy();
  }
});

test("spawn in a gone sandbox fails with not_found", async () => {
  const gone = await Sandbox.create({ socketPath, ttl: "5m", labels: { suite: "sdk-js" } });
  await gone.close();
  await assert.rejects(gone.spawn(["true"]).result, NotFoundError);
});

test("spawn: a WebSocket message past maxJsonBytes fails naming the option", async () => {
  // The server sends at most 64 KiB of output a message, base64 in JSON:
  // past 16 KiB here.
  const small = await Sandbox.connect(sb.id, { socketPath, maxJsonBytes: 16 << 10 });
  const h = small.spawn(["python3", "-c", "import sys; sys.stdout.write('x' * 65536)"], { stdin: false });
  await assert.rejects(h.result, (err) => err.kind === "internal" && /maxJsonBytes/.test(err.message));
});
