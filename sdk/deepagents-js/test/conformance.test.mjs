// deepagents' sandbox contract, checked through the real deepagents
// package: every file method below (ls, read, write, edit, grep, glob,
// readRaw) is BaseSandbox's own, running over AirlockSandbox's execute,
// uploadFiles and downloadFiles against a live airlock server.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { BaseSandbox, isSandboxBackend } from "deepagents";
import { AirlockSandbox, MAX_COMMAND_ARG, TIMEOUT_EXIT_CODE, checkPath, execArgs } from "../dist/index.js";
import { socketPath } from "./env.mjs";

let sb;
before(async () => {
  sb = await AirlockSandbox.create({ socketPath, ttl: "10m", idleTimeout: "5m", labels: { suite: "sdk-deepagents" } });
});
after(async () => {
  await sb?.close();
});

const PNG = Buffer.from("89504e470d0a1a0a", "hex");
const all256 = Buffer.from(Array.from({ length: 256 }, (_, i) => i));

test("AirlockSandbox is a deepagents BaseSandbox and a sandbox backend", () => {
  assert.ok(sb instanceof BaseSandbox);
  assert.ok(isSandboxBackend(sb));
  assert.match(sb.id, /^sb-[0-9a-f]+$/);
});

test("write, read with line numbers and pagination, edit", async () => {
  const w = await sb.write("/home/user/src/app.py", "a = 1\nb = 2\nprint(a + b)\n");
  assert.equal(w.error, undefined);
  assert.equal(w.path, "/home/user/src/app.py");
  const r = await sb.read("/home/user/src/app.py");
  assert.equal(r.error, undefined);
  assert.match(r.content, /^\s+1\ta = 1\n\s+2\tb = 2\n\s+3\tprint\(a \+ b\)\n$/);
  const page = await sb.read("/home/user/src/app.py", 1, 1);
  assert.match(page.content, /^\s+2\tb = 2\n$/);
  const e = await sb.edit("/home/user/src/app.py", "b = 2", "b = 40");
  assert.equal(e.error, undefined);
  assert.equal(e.occurrences, 1);
  const x = await sb.execute("python3 /home/user/src/app.py");
  assert.equal(x.output, "41\n");
  assert.equal(x.exitCode, 0);
  const twice = await sb.write("/home/user/src/dup.txt", "x x x\n");
  assert.equal(twice.error, undefined);
  assert.match((await sb.edit("/home/user/src/dup.txt", "x", "y")).error, /Multiple occurrences/);
  assert.equal((await sb.edit("/home/user/src/dup.txt", "x", "y", true)).occurrences, 3);
  assert.match((await sb.edit("/home/user/src/dup.txt", "zzz", "y")).error, /not found/);
  assert.match((await sb.read("/home/user/nope.txt")).error, /not found/);
  assert.match((await sb.edit("/home/user/nope.txt", "a", "b")).error, /not found/);
});

test("delete removes a file or a directory; a missing one is an error", async () => {
  await sb.write("/home/user/del/a.txt", "a\n");
  await sb.write("/home/user/del/sub/b.txt", "b\n");
  assert.equal((await sb.delete("/home/user/del/a.txt")).error, undefined);
  assert.match((await sb.read("/home/user/del/a.txt")).error, /not found/);
  assert.equal((await sb.delete("/home/user/del")).error, undefined);
  assert.deepEqual((await sb.ls("/home/user/del")).files, []);
  assert.match((await sb.delete("/home/user/del")).error, /not found/);
});

test("ls lists a directory with sizes and marks subdirectories", async () => {
  await sb.write("/home/user/lsdir/one.txt", "1\n");
  await sb.write("/home/user/lsdir/sub/two.txt", "22\n");
  const r = await sb.ls("/home/user/lsdir");
  assert.equal(r.error, undefined);
  const byPath = Object.fromEntries(r.files.map((f) => [f.path, f]));
  assert.deepEqual(Object.keys(byPath).sort(), ["/home/user/lsdir/one.txt", "/home/user/lsdir/sub/"]);
  assert.equal(byPath["/home/user/lsdir/one.txt"].size, 2);
  assert.equal(byPath["/home/user/lsdir/one.txt"].is_dir, false);
  assert.equal(byPath["/home/user/lsdir/sub/"].is_dir, true);
});

test("grep finds literal text, with a glob filter", async () => {
  await sb.write("/home/user/g/a.py", "needle = 1\nhay\n");
  await sb.write("/home/user/g/b.txt", "hay\nneedle.*literal\n");
  const r = await sb.grep("needle", "/home/user/g");
  assert.equal(r.error, undefined);
  const got = r.matches.map((m) => `${m.path}:${m.line}:${m.text}`).sort();
  assert.deepEqual(got, ["/home/user/g/a.py:1:needle = 1", "/home/user/g/b.txt:2:needle.*literal"]);
  const lit = await sb.grep("needle.*", "/home/user/g");
  assert.deepEqual(lit.matches.map((m) => m.path), ["/home/user/g/b.txt"]);
  const py = await sb.grep("needle", "/home/user/g", "*.py");
  assert.deepEqual(py.matches.map((m) => m.path), ["/home/user/g/a.py"]);
});

test("glob matches recursively against the base path", async () => {
  await sb.write("/home/user/proj/main.py", "");
  await sb.write("/home/user/proj/lib/util.py", "");
  await sb.write("/home/user/proj/lib/notes.md", "");
  const all = await sb.glob("**/*.py", "/home/user/proj");
  assert.equal(all.error, undefined);
  assert.deepEqual(all.files.map((f) => f.path).sort(), ["lib/util.py", "main.py"]);
  const top = await sb.glob("*.py", "/home/user/proj");
  assert.deepEqual(top.files.map((f) => f.path), ["main.py"]);
});

test("unicode names: write, read, ls, glob, grep, upload and download", async () => {
  const dir = "/home/user/données";
  const name = `${dir}/日本語 файл ✓.txt`;
  assert.equal((await sb.write(name, "héllo wörld ✓\n")).error, undefined);
  assert.match((await sb.read(name)).content, /\théllo wörld ✓\n/);
  assert.deepEqual((await sb.ls(dir)).files.map((f) => f.path), [name]);
  assert.deepEqual((await sb.glob("*.txt", dir)).files.map((f) => f.path), ["日本語 файл ✓.txt"]);
  assert.deepEqual((await sb.grep("wörld", dir)).matches.map((m) => [m.path, m.line]), [[name, 1]]);
  const [d] = await sb.downloadFiles([name]);
  assert.equal(d.error, null);
  assert.equal(Buffer.from(d.content).toString(), "héllo wörld ✓\n");
});

test("all 256 byte values round-trip: uploadFiles/downloadFiles, and BaseSandbox write/read of a binary type", async () => {
  const content = Buffer.concat([all256, Buffer.from(all256).reverse(), all256]);
  const [u] = await sb.uploadFiles([["/home/user/bytes.bin", content]]);
  assert.deepEqual(u, { path: "/home/user/bytes.bin", error: null });
  const [d] = await sb.downloadFiles(["/home/user/bytes.bin"]);
  assert.equal(d.error, null);
  assert.ok(d.content instanceof Uint8Array);
  assert.ok(Buffer.from(d.content).equals(content));
  // BaseSandbox writes a binary type from base64 and reads it back raw.
  const png = Buffer.concat([PNG, content]);
  assert.equal((await sb.write("/home/user/bytes.png", png.toString("base64"))).error, undefined);
  const r = await sb.read("/home/user/bytes.png");
  assert.equal(r.error, undefined);
  assert.equal(r.mimeType, "image/png");
  assert.ok(Buffer.from(r.content).equals(png));
  const raw = await sb.readRaw("/home/user/bytes.png");
  assert.ok(Buffer.from(raw.data.content).equals(png));
});

test("a 10 MiB file round-trips exactly", async () => {
  const big = randomBytes(10 << 20);
  const [u] = await sb.uploadFiles([["/home/user/big.bin", big]]);
  assert.equal(u.error, null);
  const size = await sb.execute("stat -c %s /home/user/big.bin && sha256sum /home/user/big.bin");
  assert.match(size.output, new RegExp(`^${10 << 20}\\n`));
  const [d] = await sb.downloadFiles(["/home/user/big.bin"]);
  assert.equal(d.error, null);
  assert.equal(d.content.byteLength, big.length);
  assert.ok(Buffer.from(d.content).equals(big));
  await sb.execute("rm /home/user/big.bin");
});

test("per-file results keep input order, with partial success", async () => {
  await sb.execute("mkdir -p /home/user/adir");
  const up = await sb.uploadFiles([
    ["/home/user/ok1.txt", Buffer.from("1")],
    ["relative.txt", Buffer.from("x")],
    ["/etc/evil.txt", Buffer.from("x")],
    ["/home/user/adir", Buffer.from("x")],
    ["/home/user/sub/ok2.txt", Buffer.from("2")],
  ]);
  assert.deepEqual(up, [
    { path: "/home/user/ok1.txt", error: null },
    { path: "relative.txt", error: "invalid_path" },
    { path: "/etc/evil.txt", error: "permission_denied" },
    { path: "/home/user/adir", error: "is_directory" },
    { path: "/home/user/sub/ok2.txt", error: null },
  ]);
  const down = await sb.downloadFiles(["/home/user/sub/ok2.txt", "/home/user/missing.txt", "/home/user/ok1.txt"]);
  assert.deepEqual(
    down.map((d) => [d.path, d.error, d.content && Buffer.from(d.content).toString()]),
    [
      ["/home/user/sub/ok2.txt", null, "2"],
      ["/home/user/missing.txt", "file_not_found", null],
      ["/home/user/ok1.txt", null, "1"],
    ],
  );
  // One request for the list: a path given twice, a dotfile among them.
  await sb.execute("printf 'A=1' > /home/user/.env");
  const again = await sb.downloadFiles(["/home/user/ok1.txt", "/home/user/.env", "/home/user/ok1.txt"]);
  assert.deepEqual(
    again.map((d) => [d.error, d.content && Buffer.from(d.content).toString()]),
    [[null, "1"], ["permission_denied", null], [null, "1"]],
  );
});

test("each error code", async () => {
  await sb.execute("mkdir -p /home/user/errdir && ln -sf /etc/passwd /home/user/link.txt && printf '\\177ELF\\2\\1\\1' > /home/user/prog.bin");
  const cases = [
    ["/home/user/absent.txt", "file_not_found"],
    ["/home/user/absent/deeper.txt", "file_not_found"],
    ["/tmp/x.txt", "file_not_found"],
    ["/usr/bin/evil", "permission_denied"],
    ["/home/user/errdir", "is_directory"],
    ["/etc/passwd", "permission_denied"],
    ["/home/user/link.txt", "permission_denied"],
    ["/home/user/prog.bin", "permission_denied"],
    ["notes.txt", "invalid_path"],
    ["./notes.txt", "invalid_path"],
    ["/home/user/../../etc/passwd", "invalid_path"],
    ["/home/user//x.txt", "invalid_path"],
    ["/home/user/a\u0000b.txt", "invalid_path"],
    ["", "invalid_path"],
  ];
  const down = await sb.downloadFiles(cases.map(([p]) => p));
  assert.deepEqual(down.map((d) => [d.path, d.error]), cases);
  assert.ok(down.every((d) => d.content === null));
  const up = await sb.uploadFiles([
    ["/home/user/errdir", Buffer.from("x")],
    ["/usr/bin/evil", Buffer.from("x")],
    ["/home/user/link.txt", Buffer.from("x")],
    ["tmp/relative.txt", Buffer.from("x")],
  ]);
  assert.deepEqual(up.map((u) => u.error), ["is_directory", "permission_denied", "permission_denied", "invalid_path"]);
  assert.equal(checkPath("/home/user/ok.txt"), null);
  assert.equal(execArgs("x".repeat(MAX_COMMAND_ARG))[0].length, 5);
  assert.equal(execArgs("x".repeat(MAX_COMMAND_ARG + 1))[0].length, 3);
});

test("execute: sh -c, stdout and stderr combined in order, exit codes", async () => {
  const r = await sb.execute("echo one; echo two >&2; echo three; echo four >&2; exit 7");
  assert.deepEqual(r, { output: "one\ntwo\nthree\nfour\n", exitCode: 7, truncated: false });
  const q = await sb.execute("echo \"$0\" 'quoted $HOME' && cd /tmp && pwd");
  assert.equal(q.output, "sh quoted $HOME\n/tmp\n");
  assert.equal((await sb.execute("exit 0")).exitCode, 0);
  const syntax = await sb.execute("if then");
  assert.notEqual(syntax.exitCode, 0);
  assert.match(syntax.output, /syntax error|unexpected/);
});

test("execute: a command longer than one argument may be (deepagents' heredocs) runs the same way", async () => {
  const payload = "x".repeat(300000);
  const r = await sb.execute(`wc -c <<'EOF'\n${payload}\nEOF\necho err >&2; cat; echo "stdin was empty"; exit 5`);
  assert.deepEqual(r, { output: "300001\nerr\nstdin was empty\n", exitCode: 5, truncated: false });
});

test("execute: a timeout is exit code 124", async () => {
  const r = await sb.execute("echo started; sleep 30", { timeout: "1s" });
  assert.equal(r.exitCode, TIMEOUT_EXIT_CODE);
  assert.match(r.output, /^started\n/);
  assert.match(r.output, /timeout/);
  assert.equal(r.truncated, false);
});

test("execute: truncated when airlock's output cap cut the output", async () => {
  const capped = await AirlockSandbox.create({ socketPath, ttl: "5m", outputLimit: "64KiB", labels: { suite: "sdk-deepagents" } });
  try {
    const r = await capped.execute("head -c 300000 /dev/zero | tr '\\0' a; echo END");
    assert.equal(r.truncated, true);
    assert.ok(r.output.startsWith("a".repeat(65536)));
    assert.match(r.output, /output cap/);
    const small = await capped.execute("head -c 1000 /dev/zero | tr '\\0' b");
    assert.deepEqual(small, { output: "b".repeat(1000), exitCode: 0, truncated: false });
  } finally {
    await capped.close();
  }
});

test("connect wraps an existing sandbox; close is idempotent", async () => {
  const again = await AirlockSandbox.connect(sb.id, { socketPath });
  assert.equal(again.id, sb.id);
  assert.equal((await again.read("/home/user/ok1.txt")).content.trim(), "1\t1");
  const tmp = await AirlockSandbox.create({ socketPath, ttl: "5m", labels: { suite: "sdk-deepagents" } });
  await tmp.close();
  await tmp.close();
  await assert.rejects(tmp.execute("true"), (e) => e.kind === "not_found");
});
