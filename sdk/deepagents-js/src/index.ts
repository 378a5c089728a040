/**
 * airlock as a deepagents sandbox backend.
 *
 * `AirlockSandbox` extends deepagents' own `BaseSandbox`, so ls, read,
 * write, edit, grep and glob are deepagents' implementations, run inside
 * an airlock sandbox (gVisor or runc+seccomp, no network, read-only root,
 * cgroup limits) on this host: no cloud account, no API key.
 *
 * ```ts
 * import { createDeepAgent } from "deepagents";
 * import { AirlockSandbox } from "@airlock-sandbox/deepagents";
 *
 * const backend = await AirlockSandbox.create({ memory: "1GiB", ttl: "1h" });
 * try {
 *   const agent = createDeepAgent({ model, backend });
 *   await agent.invoke({ messages: [{ role: "user", content: "…" }] });
 * } finally {
 *   await backend.close();
 * }
 * ```
 */
import {
  BaseSandbox,
  type ExecuteResponse,
  type FileDownloadResponse,
  type FileOperationError,
  type FileUploadResponse,
  type SandboxBackendProtocolV2,
} from "deepagents";
import {
  AirlockError,
  Sandbox,
  streamBytes,
  type ConnectionOptions,
  type CreateOptions,
  type Duration,
  type Result,
} from "airlock-sandbox";

/**
 * The download allowlist an AirlockSandbox is created with unless told
 * otherwise: airlock's session default (text, CSV, JSON, images, PDF,
 * source code) plus application/octet-stream, the content nothing
 * recognises, so that an agent can read back the data files it wrote.
 * airlock's scanner still refuses executables, archives a host would
 * open by itself, HTML, links, devices, dotfiles and names whose
 * extension disagrees with their content.
 */
export const AGENT_DOWNLOAD_TYPES: readonly string[] = [
  "text/plain",
  "text/csv",
  "application/json",
  "image/png",
  "image/jpeg",
  "image/gif",
  "image/webp",
  "application/pdf",
  "text/x-python",
  "text/javascript",
  "text/x-shellscript",
  "text/x-perl",
  "text/x-lua",
  "text/tab-separated-values",
  "application/x-ndjson",
  "application/octet-stream",
];

/** The exit code execute() reports for a command airlock stopped at its timeout (Daytona's convention, like timeout(1)). */
export const TIMEOUT_EXIT_CODE = 124;

/** The options of AirlockSandbox.create: those of airlock-sandbox's Sandbox.create. */
export type AirlockSandboxOptions = CreateOptions;

/** The options of one execute(). */
export interface ExecuteOptions {
  /** The command's wall-clock limit (default: the sandbox's `timeout`). */
  timeout?: Duration;
}

/** Where file transfers reach in an airlock sandbox: its workspace and /tmp. */
const AREAS = ["/home/user/", "/tmp/"];

/**
 * Why path cannot name a file in a sandbox, as deepagents' code, or null
 * when it can. Relative paths are invalid: deepagents speaks of absolute
 * paths only.
 */
export function checkPath(path: unknown): FileOperationError | null {
  if (typeof path !== "string" || !path.startsWith("/") || path.length > 4096) return "invalid_path";
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(path)) return "invalid_path";
  const comps = path.slice(1).split("/");
  if (comps.some((c) => c === "" || c === "." || c === "..")) return "invalid_path";
  return null;
}

/**
 * deepagents' error code for airlock's refusal of a file transfer. The
 * path has passed checkPath, so airlock's own invalid_path means the path
 * is outside the areas a transfer may touch (not allowed, rather than
 * malformed), or inside them crosses a file or another mount (invalid). Every refusal by the artifact
 * scanner (a link, a device, a type not on the allowlist, a dotfile, a
 * file too large) is permission_denied too.
 */
export function fileErrorOf(reason: string | undefined, path: string): FileOperationError {
  switch (reason) {
    case "not_found":
      return "file_not_found";
    case "is_directory":
      return "is_directory";
    case "bad_name":
      return "invalid_path";
    case "invalid_path":
      return AREAS.some((w) => path.startsWith(w)) ? "invalid_path" : "permission_denied";
    default:
      return "permission_denied";
  }
}

/**
 * The output deepagents sees of an exec whose stderr went to its stdout:
 * the bytes airlock kept, with a marker where its output cap cut them, and
 * a last line saying why the command ended when it did not exit by itself.
 */
export function executeResponseOf(r: Result, timeoutHint?: string): ExecuteResponse {
  const out = r.stdout;
  const dec = new TextDecoder("utf-8");
  let output = dec.decode(streamBytes(out));
  const truncated = Boolean(out?.truncated) || r.reason === "output_limit";
  if (out?.truncated) {
    output += `\n[… airlock cut ${out.omitted_bytes ?? out.bytes} bytes of output here: its output cap …]\n`;
    output += dec.decode(streamBytes(out, true).subarray(streamBytes(out).length));
  }
  const err = dec.decode(streamBytes(r.stderr));
  if (err) output += err;
  let exitCode: number | null = r.exit_code;
  switch (r.reason) {
    case "exited":
      break;
    case "timeout":
      exitCode = TIMEOUT_EXIT_CODE;
      output += `\n[airlock: the command was stopped at its timeout${timeoutHint ? ` of ${timeoutHint}` : ""}]`;
      break;
    case "output_limit":
      output += "\n[airlock: the command was stopped when its output passed the cap]";
      break;
    case "oom":
      output += "\n[airlock: the command was killed at the sandbox's memory limit]";
      break;
    case "pids_limit":
      output += "\n[airlock: the command hit the sandbox's process limit]";
      break;
    case "error":
      exitCode = r.exit_code >= 0 ? r.exit_code : null;
      output += `\n[airlock: ${r.error ?? "the command could not run"}]`;
      break;
    default:
      output += `\n[airlock: the command ended: ${r.reason}]`;
  }
  return { output, exitCode, truncated };
}

/**
 * The longest command execute() passes as an argument. Linux refuses one
 * argument past 128 KiB (MAX_ARG_STRLEN); a longer command (deepagents
 * sends file contents in heredocs) goes on stdin instead.
 */
export const MAX_COMMAND_ARG = 100 * 1024;

/**
 * The argv and options of an exec that runs command as deepagents expects.
 * The outer shell joins stderr to stdout at the descriptor, then the
 * command runs as `sh -c command` exactly, with its own $0 and parsing. A
 * command too long for one argument is read from stdin and run by eval in
 * that shell, its stdin then /dev/null, as `sh -c` would leave it.
 */
export function execArgs(command: string, timeout?: Duration): [string[], { timeout?: Duration; stdin?: Uint8Array }] {
  const bytes = new TextEncoder().encode(command);
  if (bytes.length <= MAX_COMMAND_ARG) {
    return [["sh", "-c", 'exec 2>&1; exec sh -c "$1"', "sh", command], { timeout }];
  }
  return [["sh", "-c", 'exec 2>&1; __airlock_command=$(cat) && exec </dev/null && eval "$__airlock_command"'], { timeout, stdin: bytes }];
}

/**
 * A deepagents sandbox backend on airlock: SandboxBackendProtocolV2, by
 * extending deepagents' BaseSandbox.
 */
export class AirlockSandbox extends BaseSandbox implements SandboxBackendProtocolV2 {
  /** The airlock sandbox id. */
  readonly id: string;
  /** The airlock client's handle, for what deepagents has no method for. */
  readonly sandbox: Sandbox;

  constructor(sandbox: Sandbox) {
    super();
    this.sandbox = sandbox;
    this.id = sandbox.id;
  }

  /**
   * Create an airlock sandbox and wrap it. The options are airlock's
   * (memory, cpus, timeout, outputLimit, idleTimeout, ttl, image, …, and
   * socketPath or url plus token); downloadTypes defaults to
   * AGENT_DOWNLOAD_TYPES.
   */
  static async create(opts: AirlockSandboxOptions = {}): Promise<AirlockSandbox> {
    const sb = await Sandbox.create({ ...opts, downloadTypes: opts.downloadTypes ?? [...AGENT_DOWNLOAD_TYPES] });
    return new AirlockSandbox(sb);
  }

  /** Wrap an existing airlock sandbox. */
  static async connect(id: string, conn: ConnectionOptions = {}): Promise<AirlockSandbox> {
    return new AirlockSandbox(await Sandbox.connect(id, conn));
  }

  /**
   * Run command with `sh -c` in the sandbox's workspace. stderr is joined
   * to stdout at the file descriptor, so the output keeps the order the
   * command wrote it in. A command stopped at its timeout reports exit
   * code 124; truncated is true when airlock's output cap cut the output.
   */
  async execute(command: string, options: ExecuteOptions = {}): Promise<ExecuteResponse> {
    if (typeof command !== "string") throw new TypeError("execute: command must be a string");
    const r = await this.sandbox.exec(...execArgs(command, options.timeout));
    return executeResponseOf(r, options.timeout === undefined ? undefined : String(options.timeout));
  }

  /**
   * Upload files in one request per area (a tar stream the server judges
   * entry by entry), answering in input order; one refusal does not stop
   * the others. A failure that is not about a file (the sandbox is gone,
   * the server is down) is thrown.
   */
  async uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]> {
    const out: FileUploadResponse[] = files.map(([path]) => ({ path, error: checkPath(path) }));
    const idx = out.flatMap((r, i) => (r.error ? [] : [i]));
    const recs = await this.sandbox.files.writeMany(idx.map((i) => files[i]));
    idx.forEach((i, k) => {
      const rec = recs[k];
      if (rec.decision !== "accepted") out[i].error = fileErrorOf(rec.reason, out[i].path);
    });
    return out;
  }

  /** Download files through airlock's scanner, each on its own, in input order. */
  async downloadFiles(paths: string[]): Promise<FileDownloadResponse[]> {
    const out: FileDownloadResponse[] = [];
    for (const path of paths) {
      const bad = checkPath(path);
      if (bad) {
        out.push({ path, content: null, error: bad });
        continue;
      }
      try {
        const content = await this.sandbox.files.read(path);
        out.push({ path, content: new Uint8Array(content.buffer, content.byteOffset, content.byteLength), error: null });
      } catch (err) {
        out.push({ path, content: null, error: this.#fileError(err, path) });
      }
    }
    return out;
  }

  /** Destroy the sandbox. Idempotent. */
  async close(): Promise<void> {
    await this.sandbox.close();
  }

  #fileError(err: unknown, path: string): FileOperationError {
    // A refusal carries the reason word; anything else is not the file's
    // fault and must not pass for one.
    if (err instanceof AirlockError && err.reason) return fileErrorOf(err.reason, path);
    throw err;
  }
}
