// Tests against a live `airlock serve` (sdk/test.sh starts one): every
// request goes through the real server to real sandboxes.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  InvalidInputError,
  NotFoundError,
  UnauthorizedError,
  Sandbox,
  run,
  stdoutText,
  stderrText,
  streamBytes,
} from "../dist/index.js";

const socketPath = process.env.AIRLOCK_SOCKET;
const url = process.env.AIRLOCK_URL;
const token = process.env.AIRLOCK_TOKEN;
if (!socketPath || !url || !token) {
  throw new Error("these tests need a live server: set AIRLOCK_SOCKET, AIRLOCK_URL and AIRLOCK_TOKEN, or run sdk/test.sh");
}
const overSocket = { socketPath };
const overTCP = { url, token };

let sb;
before(async () => {
  sb = await Sandbox.create({ ...overSocket, ttl: "10m", idleTimeout: "5m", timeout: "30s", labels: { suite: "sdk-js" } });
});
after(async () => {
  await sb?.close();
});

test("exec runs argv, and a string by sh -c; the Result is the server's", async () => {
  const r = await sb.exec(["python3", "-c", "import sys; print(6*7); print('e', file=sys.stderr); sys.exit(3)"]);
  assert.equal(r.reason, "exited");
  assert.equal(r.exit_code, 3);
  assert.equal(stdoutText(r), "42\n");
  assert.equal(stderrText(r), "e\n");
  assert.equal(r.sandbox_id, sb.id);
  const s = await sb.exec("echo $0 && echo one two | wc -w");
  assert.equal(stdoutText(s), "sh\n2\n");
});

test("exec passes stdin, env and the working directory", async () => {
  const r = await sb.exec(["sh", "-c", 'pwd; echo "$GREETING"; cat'], { stdin: "from stdin\n", env: { GREETING: "hello" }, cwd: "/tmp" });
  assert.equal(stdoutText(r), "/tmp\nhello\nfrom stdin\n");
  const bin = Buffer.from([0, 1, 2, 255, 254, 10]);
  const b = await sb.exec(["cat"], { stdin: bin });
  assert.deepEqual(streamBytes(b.stdout), bin);
});

test("a timeout is the Result's reason, not an error", async () => {
  const r = await sb.exec(["sleep", "30"], { timeout: "1s" });
  assert.equal(r.reason, "timeout");
});

test("streaming delivers stdout and stderr to the callbacks, live, and the same bytes as the Result", async () => {
  const out = [];
  const err = [];
  let released = null;
  // The command waits for a file that the test writes only once the first
  // line has arrived: the chunk came before the command ended.
  const cmd = "echo first; echo oops >&2; i=0; while [ ! -f /home/user/go.flag ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; echo second";
  const r = await sb.exec(cmd, {
    timeout: "60s",
    onStdout: (c) => {
      out.push(c);
      if (!released && Buffer.concat(out).toString().includes("first")) released = sb.files.write("/home/user/go.flag", "");
    },
    onStderr: (c) => err.push(c),
  });
  assert.ok(released, "no stdout chunk arrived while the command ran");
  await released;
  assert.equal(r.reason, "exited");
  assert.equal(Buffer.concat(out).toString(), "first\nsecond\n");
  assert.equal(Buffer.concat(err).toString(), "oops\n");
  assert.equal(stdoutText(r), "first\nsecond\n");
});

test("files: write and read back text and bytes; the reply names size and sha256", async () => {
  const data = "print('hi from a file')\n";
  const w = await sb.files.write("/home/user/pkg/hello.py", data);
  assert.equal(w.path, "/home/user/pkg/hello.py");
  assert.equal(w.size, Buffer.byteLength(data));
  assert.equal(w.sha256, createHash("sha256").update(data).digest("hex"));
  assert.equal((await sb.files.read("/home/user/pkg/hello.py")).toString(), data);
  const r = await sb.exec(["python3", "pkg/hello.py"]);
  assert.equal(stdoutText(r), "hi from a file\n");
  const png = Buffer.concat([Buffer.from("89504e470d0a1a0a", "hex"), Buffer.alloc(64, 7)]);
  await sb.files.write("/home/user/x.png", png);
  assert.deepEqual(await sb.files.read("/home/user/x.png"), png);
});

test("files: the scanner's refusals are typed errors with their reason word", async () => {
  await sb.files.write("/home/user/blob.bin", Buffer.from([0, 1, 2, 3, 255, 0, 0, 7]));
  await assert.rejects(sb.files.read("/home/user/blob.bin"), (e) => e instanceof InvalidInputError && e.reason === "type_not_allowed");
  await sb.exec(["ln", "-s", "/etc/passwd", "/home/user/link.txt"]);
  await assert.rejects(sb.files.read("/home/user/link.txt"), (e) => e instanceof InvalidInputError && e.reason === "symlink");
  await assert.rejects(sb.files.read("/home/user/missing.txt"), (e) => e instanceof NotFoundError && e.reason === "not_found");
  await assert.rejects(sb.files.read("/home/user/pkg"), (e) => e.reason === "is_directory");
  await assert.rejects(sb.files.write("/etc/evil.txt", "x"), (e) => e instanceof InvalidInputError && e.reason === "invalid_path");
  await assert.rejects(sb.files.write("/home/user/../x", "x"), (e) => e instanceof InvalidInputError && e.reason === "invalid_path");
});

test("files.writeMany: one tar request per area, a record per input in input order", async () => {
  await sb.exec(["sh", "-c", "mkdir -p /home/user/many/adir && ln -sf /etc /home/user/many/elink"]);
  const long = "d/".repeat(60) + "deep.txt";
  const files = [
    ["/home/user/many/a.txt", "a\n"],
    ["/tmp/many/b.txt", "b\n"],
    ["many/données/é.txt", "é\n"],
    ["/etc/evil.txt", "x"],
    ["/home/user/many/adir", "x"],
    ["/home/user/many/elink/x.txt", "x"],
    ["/home/user/many/../escape.txt", "x"],
    [`/home/user/many/${long}`, "deep\n"],
    ["/home/user/many/a.txt", "a again\n"],
  ];
  const recs = await sb.files.writeMany(files);
  assert.deepEqual(
    recs.map((r) => [r.decision, r.reason ?? ""]),
    [
      ["accepted", ""],
      ["accepted", ""],
      ["accepted", ""],
      ["refused", "invalid_path"],
      ["refused", "is_directory"],
      ["refused", "symlink"],
      ["refused", "invalid_path"],
      ["accepted", ""],
      ["accepted", ""],
    ],
  );
  assert.equal(recs[0].sha256, createHash("sha256").update("a\n").digest("hex"));
  assert.equal((await sb.files.read("/home/user/many/a.txt")).toString(), "a again\n");
  assert.equal((await sb.files.read("/tmp/many/b.txt")).toString(), "b\n");
  assert.equal((await sb.files.read("/home/user/many/données/é.txt")).toString(), "é\n");
  assert.equal((await sb.files.read(`/home/user/many/${long}`)).toString(), "deep\n");
  const r = await sb.exec(["sh", "-c", "test ! -e /home/user/escape.txt && test ! -e /etc/evil.txt && ls /etc | grep -c x.txt"]);
  assert.equal(stdoutText(r), "0\n");
  assert.deepEqual(await sb.files.writeMany([]), []);
});

test("the same sandbox over TCP with the token; a wrong token is unauthorized", async () => {
  const tcp = await Sandbox.connect(sb.id, overTCP);
  const r = await tcp.exec(["cat", "/home/user/pkg/hello.py"]);
  assert.equal(stdoutText(r), "print('hi from a file')\n");
  await assert.rejects(Sandbox.connect(sb.id, { url, token: "0".repeat(64) }), UnauthorizedError);
  await assert.rejects(Sandbox.list({ url, token: "" }), UnauthorizedError);
  const list = await Sandbox.list(overTCP);
  assert.ok(list.some((s) => s.id === sb.id));
});

test("a gone sandbox is not_found; bad input is invalid_input naming the field", async () => {
  await assert.rejects(Sandbox.connect("sb-00000000000000000000", overSocket), NotFoundError);
  await assert.rejects(Sandbox.create({ ...overSocket, extra: { no_such_flag: 1 } }), (e) => e instanceof InvalidInputError && /no_such_flag/.test(e.message));
  await assert.rejects(Sandbox.create({ ...overSocket, memory: "lots" }), InvalidInputError);
});

test("close is idempotent; a closed sandbox's exec is not_found", async () => {
  const tmp = await Sandbox.create({ ...overSocket, ttl: "5m", labels: { suite: "sdk-js" } });
  await tmp.close();
  await tmp.close();
  await assert.rejects(tmp.exec(["true"]), NotFoundError);
});

test("run() is a one-shot sandbox; its Result is run --json's", async () => {
  const r = await run(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], { ...overTCP, stdin: "abc", timeout: "30s" });
  assert.equal(r.reason, "exited");
  assert.equal(r.exit_code, 0);
  assert.equal(stdoutText(r), "ABC\n");
  assert.ok(r.id);
});

test("a retried create with the same Idempotency-Key returns the same sandbox", async () => {
  const key = `sdk-js-${process.pid}-${Date.now()}`;
  const a = await Sandbox.create({ ...overSocket, ttl: "5m", labels: { suite: "sdk-js" }, idempotencyKey: key });
  try {
    const b = await Sandbox.create({ ...overSocket, ttl: "5m", labels: { suite: "sdk-js" }, idempotencyKey: key });
    assert.equal(b.id, a.id);
  } finally {
    await a.close();
  }
});
