// The types generated from server/openapi.json (src/api.ts) against real
// responses of a live `airlock serve` (sdk/test.sh starts one): each
// response becomes an object literal of its schema's type, and tsc, with
// its excess-property and required-property checks, must accept them all.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const url = process.env.AIRLOCK_URL;
const token = process.env.AIRLOCK_TOKEN;
if (!url || !token) {
  throw new Error("these tests need a live server: set AIRLOCK_URL and AIRLOCK_TOKEN, or run sdk/test.sh");
}
const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");

async function call(method, path, body, raw = false) {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(raw ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : raw ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === "" ? undefined : JSON.parse(text) };
}

test("real responses type-check against the generated schemas", async () => {
  const got = [];
  const keep = (schema, r) => got.push([schema, r.json]);
  keep("Result", await call("POST", "/v1/runs", { argv: ["sh", "-c", "echo out; echo err >&2; exit 3"], timeout: "30s" }));
  keep("Result", await call("POST", "/v1/runs", { argv: ["sh", "-c", "head -c 4096 /dev/zero"], output_limit: "1KiB" }));
  const made = await call("POST", "/v1/sandboxes", { ttl: "5m", labels: { suite: "sdk-js-types" } });
  assert.equal(made.status, 201, JSON.stringify(made.json));
  keep("Sandbox", made);
  const id = made.json.id;
  try {
    keep("Sandbox", await call("GET", `/v1/sandboxes/${id}`));
    const list = await call("GET", "/v1/sandboxes");
    for (const s of list.json) got.push(["Sandbox", s]);
    keep("Result", await call("POST", `/v1/sandboxes/${id}/exec`, { argv: ["python3", "-c", "print(6*7)"] }));
    keep("Transfer", await call("PUT", `/v1/sandboxes/${id}/files?path=/home/user/a.txt`, "hello\n", true));
    keep("Error", await call("GET", `/v1/sandboxes/${id}/files?path=/home/user/missing`));
  } finally {
    await call("DELETE", `/v1/sandboxes/${id}`);
  }
  keep("Error", await call("POST", "/v1/runs", { argv: ["true"], memory: "lots" }));
  keep("Error", await call("GET", "/v1/sandboxes/sb-00000000000000000000"));
  keep("FusionResponse", await call("POST", "/run_code", { code: "print(1)", language: "python" }));

  const dir = mkdtempSync(join(pkg, "test", ".types-"));
  try {
    const lines = [`import type { components } from "../../src/api.js";`, `type S = components["schemas"];`];
    got.forEach(([schema, v], i) => lines.push(`export const v${i}: S[${JSON.stringify(schema)}] = ${JSON.stringify(v)};`));
    writeFileSync(join(dir, "responses.ts"), lines.join("\n") + "\n");
    const tsc = join(pkg, "..", "node_modules", ".bin", "tsc");
    try {
      await promisify(execFile)(tsc, ["--noEmit", "--strict", "--target", "ES2022", "--module", "NodeNext", "--moduleResolution", "NodeNext", join(dir, "responses.ts")]);
    } catch (err) {
      assert.fail(`a real response does not fit its generated type:\n${err.stdout}${err.stderr}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.ok(got.length >= 10);
});
