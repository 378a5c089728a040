// airlock's MCP tools through the official @modelcontextprotocol/sdk client.
//
// Over stdio by default: the client spawns `airlock mcp --root ROOT`
// (AIRLOCK_BIN, default ../../../bin/airlock; AIRLOCK_ROOT, default
// /var/lib/airlock). With MCP_URL set, over streamable HTTP instead, with
// MCP_TOKEN as the bearer token (airlock serve's /mcp).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const bin = process.env.AIRLOCK_BIN ?? path.resolve(here, "../../../../bin/airlock");
const root = process.env.AIRLOCK_ROOT ?? "/var/lib/airlock";

// airlock runs the CLI on the same root as the server (templates).
const airlock = (...args) => execFileSync(bin, ["--root", root, ...args], { encoding: "utf8" });

function transport() {
  if (process.env.MCP_URL) {
    const headers = {};
    if (process.env.MCP_TOKEN) headers.Authorization = `Bearer ${process.env.MCP_TOKEN}`;
    return new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), { requestInit: { headers } });
  }
  return new StdioClientTransport({ command: bin, args: ["mcp", "--root", root], stderr: "inherit" });
}

const TOOLS = [
  "run_code",
  "sandbox_create",
  "sandbox_destroy",
  "sandbox_exec",
  "sandbox_list",
  "sandbox_pause",
  "sandbox_read_file",
  "sandbox_resume",
  "sandbox_write_file",
];

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
const sha256 = (buf) => createHash("sha256").update(buf).digest("hex");

describe(`airlock MCP over ${process.env.MCP_URL ? "streamable HTTP" : "stdio"}`, () => {
  const client = new Client({ name: "airlock-acceptance", version: "1.0.0" });
  const made = [];

  // call returns a successful result's structured content; errorOf a
  // tool error's text. Either fails on the other outcome.
  async function call(name, args = {}) {
    const res = await client.callTool({ name, arguments: args });
    assert.ok(!res.isError, `${name} failed: ${text(res)}`);
    assert.ok(res.structuredContent, `${name} returned no structured content`);
    return res.structuredContent;
  }
  async function errorOf(name, args = {}) {
    const res = await client.callTool({ name, arguments: args });
    assert.equal(res.isError, true, `${name} ${JSON.stringify(args)} succeeded; want a tool error`);
    return text(res);
  }

  before(async () => {
    await client.connect(transport());
  });
  after(async () => {
    for (const id of made) {
      await client.callTool({ name: "sandbox_destroy", arguments: { sandbox_id: id } }).catch(() => {});
    }
    await client.close();
  });

  test("lists the tools, each with input and output schemas", async () => {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
    for (const t of tools) {
      assert.equal(t.inputSchema.type, "object", t.name);
      assert.equal(t.outputSchema?.type, "object", t.name);
      assert.ok(t.description.length > 20, t.name);
    }
    const run = tools.find((t) => t.name === "run_code");
    assert.deepEqual(run.inputSchema.required.sort(), ["code", "language"]);
  });

  test("run_code runs Python that prints 42", async () => {
    const r = await call("run_code", { language: "python", code: "print(6 * 7)" });
    assert.equal(r.reason, "exited");
    assert.equal(r.exit_code, 0);
    assert.equal(r.stdout, "42\n");
    assert.equal(r.stderr, "");
    assert.equal(r.truncated, false);
  });

  test("run_code runs bash with stdin, and reports its exit code", async () => {
    const r = await call("run_code", { language: "bash", code: 'read x; echo "got $x" >&2; exit 3', stdin: "hello\n" });
    assert.equal(r.reason, "exited");
    assert.equal(r.exit_code, 3);
    assert.equal(r.stderr, "got hello\n");
  });

  test("run_code ends at timeout_s with reason timeout, a result and not an error", async () => {
    const r = await call("run_code", { language: "python", code: "import time\nwhile True: time.sleep(1)", timeout_s: 1 });
    assert.equal(r.reason, "timeout");
  });

  test("run_code refuses other languages and unknown templates with what to do", async () => {
    assert.match(await errorOf("run_code", { language: "javascript", code: "console.log(1)" }), /language "javascript" is not supported: use one of bash, python, sh/);
    assert.match(await errorOf("run_code", { language: "python", code: "1", template: "mcp-no-such" }), /no template "mcp-no-such": `airlock template ls` lists the templates/);
  });

  test("run_code and sandbox_create on a template take its settings; a wider one is refused", async () => {
    airlock("template", "create", "mcp-e2e", "--replace", "--memory", "256MiB", "--env", "FROM_TEMPLATE=yes");
    try {
      const r = await call("run_code", { language: "python", code: "import os; print(os.environ['FROM_TEMPLATE'])", template: "mcp-e2e" });
      assert.equal(r.reason, "exited");
      assert.equal(r.stdout, "yes\n");
      const sb = await call("sandbox_create", { template: "mcp-e2e", ttl_s: 600 });
      made.push(sb.sandbox_id);
      assert.equal(sb.limits.memory_bytes, 256 * 1024 * 1024);
      assert.match(await errorOf("sandbox_create", { template: "mcp-e2e", memory: "1GiB" }), /memory 1GiB is above template "mcp-e2e"'s 256MiB/);
    } finally {
      airlock("template", "rm", "mcp-e2e");
    }
  });

  test("a sandbox: create, write, exec, read, list, destroy", async () => {
    const sb = await call("sandbox_create", { memory: "256MiB", ttl_s: 600 });
    made.push(sb.sandbox_id);
    assert.match(sb.sandbox_id, /^sb-[0-9a-f]{20}$/);
    assert.equal(sb.limits.memory_bytes, 256 * 1024 * 1024);
    assert.equal(sb.workspace, "/home/user");
    assert.ok(new Date(sb.expires_at) > new Date(sb.created_at));

    const id = sb.sandbox_id;
    const code = "import json\nprint(json.dumps({'answer': 6 * 7}))\n";
    const w = await call("sandbox_write_file", { sandbox_id: id, path: "/home/user/job.py", content: code });
    assert.equal(w.size, Buffer.byteLength(code));
    assert.equal(w.sha256, sha256(code));

    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const wb = await call("sandbox_write_file", { sandbox_id: id, path: "/home/user/data/bytes.bin", content_base64: bytes.toString("base64") });
    assert.equal(wb.size, 256);
    assert.equal(wb.sha256, sha256(bytes));

    const ex = await call("sandbox_exec", { sandbox_id: id, command: "python3 job.py > out.json && sha256sum data/bytes.bin && cat out.json" });
    assert.equal(ex.reason, "exited");
    assert.equal(ex.exit_code, 0);
    assert.equal(ex.sandbox_id, id);
    assert.equal(ex.stdout, `${sha256(bytes)}  data/bytes.bin\n{"answer": 42}\n`);

    const rd = await call("sandbox_read_file", { sandbox_id: id, path: "/home/user/out.json" });
    assert.equal(rd.content, '{"answer": 42}\n');
    assert.equal(rd.size, 15);
    assert.equal(rd.sha256, sha256('{"answer": 42}\n'));

    const to = await call("sandbox_exec", { sandbox_id: id, command: "sleep 30", timeout_s: 1 });
    assert.equal(to.reason, "timeout");
    const after = await call("sandbox_exec", { sandbox_id: id, command: "echo still here" });
    assert.equal(after.stdout, "still here\n");

    const list = await call("sandbox_list");
    const mine = list.sandboxes.find((s) => s.sandbox_id === id);
    assert.ok(mine, `sandbox_list lacks ${id}`);
    assert.ok(["ready", "running"].includes(mine.state), mine.state);

    const d = await call("sandbox_destroy", { sandbox_id: id });
    assert.deepEqual(d, { sandbox_id: id, destroyed: true });
    assert.match(await errorOf("sandbox_exec", { sandbox_id: id, command: "true" }), /is gone .*sandbox_create makes a new one/);
    assert.ok(!(await call("sandbox_list")).sandboxes.some((s) => s.sandbox_id === id));
  });

  test("refused transfers are tool errors naming the scanner's reason word", async () => {
    const sb = await call("sandbox_create", {});
    made.push(sb.sandbox_id);
    const id = sb.sandbox_id;
    await call("sandbox_exec", { sandbox_id: id, command: "ln -s /etc/passwd link; mkdir dir; head -c 4096 /dev/urandom > blob.bin" });
    assert.match(await errorOf("sandbox_read_file", { sandbox_id: id, path: "/etc/passwd" }), /\(invalid_path\)/);
    assert.match(await errorOf("sandbox_read_file", { sandbox_id: id, path: "/home/user/../../etc/passwd" }), /\(invalid_path\)/);
    assert.match(await errorOf("sandbox_read_file", { sandbox_id: id, path: "link" }), /\(symlink\)/);
    assert.match(await errorOf("sandbox_read_file", { sandbox_id: id, path: "dir" }), /\(is_directory\)/);
    assert.match(await errorOf("sandbox_read_file", { sandbox_id: id, path: "missing.txt" }), /\(not_found\)/);
    assert.match(await errorOf("sandbox_read_file", { sandbox_id: id, path: "blob.bin" }), /\(type_not_allowed\)/);
    assert.match(await errorOf("sandbox_write_file", { sandbox_id: id, path: "/usr/bin/evil", content: "x" }), /\(invalid_path\)/);
    assert.match(await errorOf("sandbox_write_file", { sandbox_id: id, path: "link", content: "x" }), /\(symlink\)/);
    assert.match(await errorOf("sandbox_write_file", { sandbox_id: id, path: "/etc/x", content: "x" }), /\(invalid_path\).*\/home\/user/);
    // /tmp is a transfer area too: a file written there is read back.
    await call("sandbox_write_file", { sandbox_id: id, path: "/tmp/x.txt", content: "in tmp" });
    assert.equal((await call("sandbox_read_file", { sandbox_id: id, path: "/tmp/x.txt" })).content, "in tmp");
    assert.match(await errorOf("sandbox_write_file", { sandbox_id: id, path: "/home/user/a", content: "a", content_base64: "YQ==" }), /not both/);
  });

  test("a file over what one MCP message carries is refused with what to do", async () => {
    const sb = await call("sandbox_create", {});
    made.push(sb.sandbox_id);
    await call("sandbox_exec", { sandbox_id: sb.sandbox_id, command: "head -c 9000000 /dev/zero | tr '\\0' a > big.txt" });
    assert.match(await errorOf("sandbox_read_file", { sandbox_id: sb.sandbox_id, path: "big.txt" }), /larger than the 8MiB sandbox_read_file returns/);
  });

  test("sandbox_create refuses what the runner refuses, with its reason", async () => {
    assert.match(await errorOf("sandbox_create", { image: "python:3" }), /creating the sandbox: .*digest/);
    assert.match(await errorOf("sandbox_create", { memory: "1MiB" }), /creating the sandbox: .*memory .* below the minimum/);
    assert.match(await errorOf("sandbox_create", { memory: "lots" }), /memory "lots": give a positive size/);
    assert.match(await errorOf("sandbox_create", { template: "python-data" }), /creating the sandbox: not_found: .*no template "python-data"/);
  });

  test("a sandbox whose client went away ends at its TTL", async () => {
    const other = new Client({ name: "airlock-acceptance-gone", version: "1.0.0" });
    await other.connect(transport());
    const res = await other.callTool({ name: "sandbox_create", arguments: { ttl_s: 2 } });
    assert.ok(!res.isError, text(res));
    const id = res.structuredContent.sandbox_id;
    made.push(id);
    await other.close(); // over stdio, its airlock mcp process ends here
    // Polled, with a bound far above the TTL for a loaded machine.
    for (let i = 0; ; i++) {
      const { sandboxes } = await call("sandbox_list");
      if (!sandboxes.some((s) => s.sandbox_id === id)) break;
      assert.ok(i < 120, `${id} outlived its 2s TTL by a minute`);
      await new Promise((r) => setTimeout(r, 500));
    }
    assert.match(await errorOf("sandbox_exec", { sandbox_id: id, command: "true" }), /is gone/);
  });

  test("a bad sandbox_id is a tool error that says what to do", async () => {
    for (const tool of ["sandbox_exec", "sandbox_read_file", "sandbox_write_file", "sandbox_destroy"]) {
      const args = { sandbox_id: "not-a-sandbox", command: "true", path: "/tmp/a", content: "x" };
      if (tool !== "sandbox_exec") delete args.command;
      if (tool === "sandbox_exec" || tool === "sandbox_destroy") delete args.path;
      if (tool !== "sandbox_write_file") delete args.content;
      assert.match(await errorOf(tool, args), /sandbox_id "not-a-sandbox" is not a sandbox id.*sandbox_list lists the live ones/, tool);
    }
    assert.match(await errorOf("sandbox_exec", { sandbox_id: "sb-00000000000000000000", command: "true" }), /is gone/);
  });

  test("airlock mcp --max-sandboxes refuses sandbox_create and run_code past it", { skip: process.env.MCP_URL ? "stdio only" : false }, async () => {
    const live = JSON.parse(airlock("sandbox", "ls", "--json")).length;
    const capped = new Client({ name: "airlock-capped", version: "1.0.0" });
    await capped.connect(new StdioClientTransport({ command: bin, args: ["mcp", "--root", root, "--max-sandboxes", String(live + 1)], stderr: "inherit" }));
    try {
      const first = await capped.callTool({ name: "sandbox_create", arguments: {} });
      assert.ok(!first.isError, text(first));
      made.push(first.structuredContent.sandbox_id);
      for (const [tool, args] of [["sandbox_create", {}], ["run_code", { language: "python", code: "print(1)" }]]) {
        const res = await capped.callTool({ name: tool, arguments: args });
        assert.equal(res.isError, true, `${tool} past --max-sandboxes ${live + 1} succeeded`);
        assert.match(text(res), new RegExp(`over_limit: .*--max-sandboxes ${live + 1}`), tool);
      }
    } finally {
      await capped.close();
    }
  });
});
