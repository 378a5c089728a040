/**
 * airlock-sandbox: a client for `airlock serve`, airlock's local API.
 *
 * ```js
 * import { Sandbox } from "airlock-sandbox";
 * const sb = await Sandbox.create({ memory: "1GiB", ttl: "30m" });
 * try {
 *   await sb.files.write("/home/user/hello.py", "print(6 * 7)\n");
 *   const r = await sb.exec(["python3", "hello.py"]);
 *   console.log(r.exit_code, stdoutText(r));
 * } finally {
 *   await sb.close();
 * }
 * ```
 */
export * from "./errors.js";
export { Transport, DEFAULT_SOCKET, DEFAULT_MAX_JSON_BYTES, DEFAULT_MAX_READ_BYTES, type ConnectionOptions } from "./transport.js";
export * from "./sandbox.js";
export { ExecHandle, DEFAULT_START_TIMEOUT, type SpawnOptions } from "./spawn.js";
