/**
 * Sandboxes and one-shot runs over the airlock API (`airlock serve`).
 * Request bodies use the CLI's flag names, so the options here are the
 * flags of `airlock sandbox create`, `airlock exec` and `airlock run` in
 * camelCase.
 */
import { Readable } from "node:stream";
import { AirlockError, errorOf, isErrorKind } from "./errors.js";
import { ConnectionOptions, Transport, decodeB64, ndjson, readAll } from "./transport.js";
import { ExecHandle } from "./spawn.js";
import { type TarEntry, tarStream, untar } from "./tar.js";
import type { components } from "./api.js";

/** The API's schemas, generated from server/openapi.json (npm run gen:types). */
export type Schemas = components["schemas"];

/** A duration: a Go duration string ("30s", "1m30s") or a number of seconds. */
export type Duration = string | number;
/** A size: a string such as "512MiB" or a number of bytes. */
export type Size = string | number;

/** The policy flags a sandbox and a one-shot run share. */
export interface PolicyOptions {
  /** A named template, where the server has templates. */
  template?: string;
  /** The image, by digest or a name the server knows. Default: the server's default image. */
  image?: string;
  /** Each exec's default wall-clock limit (the sandbox's) or the run's. */
  timeout?: Duration;
  memory?: Size;
  cpus?: string | number;
  pids?: number;
  /** Cap on each of stdout and stderr. */
  outputLimit?: Size;
  /** Environment, as KEY=VALUE strings or an object. */
  env?: string[] | Record<string, string>;
  engine?: Schemas["RunRequest"]["engine"];
  isolation?: Schemas["RunRequest"]["isolation"];
  /** Any other flag of the CLI, by its JSON name, passed as is. */
  extra?: Partial<PolicyBody>;
}

/** The options of Sandbox.create: a policy, a lifetime, and where the server is. */
export interface CreateOptions extends PolicyOptions, ConnectionOptions {
  /** End the sandbox this long after its last exec or transfer. */
  idleTimeout?: Duration;
  /** End the sandbox this long after its creation, whatever happens. */
  ttl?: Duration;
  /** Cap on the workspace at /home/user. */
  workspaceSize?: Size;
  labels?: Record<string, string>;
  /** MIME types that files.read may download (default: the server's). */
  downloadTypes?: string[];
  /** Makes a retried create return the same sandbox. */
  idempotencyKey?: string;
}

/** One stream of a Result: its first bytes (text or base64), and how many there were. */
export type Stream = Schemas["Stream"];

/** The Result of a run or exec, exactly as `airlock run --json` prints it. */
export type Result = Schemas["Result"];

/** The options of one exec. */
export interface ExecOptions {
  timeout?: Duration;
  outputLimit?: Size;
  env?: string[] | Record<string, string>;
  /** The working directory (default /home/user). */
  cwd?: string;
  stdin?: string | Uint8Array;
  /** Start the command in the background, where it lives until the sandbox ends; its output is discarded. */
  detach?: boolean;
  /** Called with each chunk of stdout as it arrives; turns on streaming. */
  onStdout?: (chunk: Buffer) => void;
  /** Called with each chunk of stderr as it arrives; turns on streaming. */
  onStderr?: (chunk: Buffer) => void;
  signal?: AbortSignal;
}

/** The options of a one-shot run. */
export interface RunOptions extends PolicyOptions, ConnectionOptions {
  stdin?: string | Uint8Array;
  workdir?: string;
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/** The server's record of a sandbox (GET /v1/sandboxes/{id}). */
export type SandboxInfo = Schemas["Sandbox"];

/** The answer to a file upload. */
export type WriteResult = Schemas["Transfer"];

/** The policy fields of a request body. */
type PolicyBody = Omit<Schemas["RunRequest"], "argv" | "stdin_b64" | "workdir">;

function duration(d: Duration | undefined): string | undefined {
  if (d === undefined) return undefined;
  if (typeof d === "number") {
    if (!Number.isFinite(d) || d <= 0) throw errorOf("invalid_input", `duration ${d}: give a positive number of seconds or a string such as "30s"`);
    return `${d}s`;
  }
  return d;
}

function size(s: Size | undefined): string | undefined {
  return s === undefined ? undefined : String(s);
}

function envList(env: string[] | Record<string, string> | undefined): string[] | undefined {
  if (env === undefined) return undefined;
  if (Array.isArray(env)) return env;
  return Object.entries(env).map(([k, v]) => `${k}=${v}`);
}

function b64(data: string | Uint8Array | undefined): string | undefined {
  if (data === undefined) return undefined;
  return Buffer.from(typeof data === "string" ? Buffer.from(data, "utf8") : data).toString("base64");
}

/** Drops undefined fields, so the server sees only what was given. */
function compact<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

function policyBody(o: PolicyOptions): PolicyBody {
  return {
    ...o.extra,
    template: o.template,
    image: o.image,
    timeout: duration(o.timeout),
    memory: size(o.memory),
    cpus: o.cpus === undefined ? undefined : String(o.cpus),
    pids: o.pids,
    output_limit: size(o.outputLimit),
    env: envList(o.env),
    engine: o.engine,
    isolation: o.isolation,
  };
}

/** The fields an exec request and the WebSocket's execute message share. */
function execBody(command: string | string[], o: Pick<ExecOptions, "timeout" | "outputLimit" | "env" | "cwd">): Schemas["ExecRequest"] {
  return {
    argv: argvOf(command),
    timeout: duration(o.timeout),
    output_limit: size(o.outputLimit),
    env: envList(o.env),
    workdir: o.cwd,
  };
}

/** The argv of a command given as a list, or as one shell string for `sh -c`. */
export function argvOf(command: string | string[]): string[] {
  if (typeof command === "string") return ["sh", "-c", command];
  if (!Array.isArray(command) || command.length === 0 || command.some((a) => typeof a !== "string")) {
    throw errorOf("invalid_input", "command: give a non-empty list of strings, or one shell string");
  }
  return command;
}

/** The bytes a Stream holds (its head; with the tail when it was truncated). */
export function streamBytes(s: Stream | undefined, withTail = false): Buffer {
  if (!s) return Buffer.alloc(0);
  const head = s.base64 !== undefined ? Buffer.from(s.base64, "base64") : Buffer.from(s.text ?? "", "utf8");
  if (!withTail || !s.truncated) return head;
  const tail = s.tail_base64 !== undefined ? Buffer.from(s.tail_base64, "base64") : Buffer.from(s.tail ?? "", "utf8");
  return Buffer.concat([head, tail]);
}

/** stdout of a Result as text (its head). */
export function stdoutText(r: Result): string {
  return streamBytes(r.stdout).toString("utf8");
}

/** stderr of a Result as text (its head). */
export function stderrText(r: Result): string {
  return streamBytes(r.stderr).toString("utf8");
}

const enc = encodeURIComponent;

/**
 * One file of Files.readMany: its download record (accepted, or refused
 * with its reason word and detail) and, when accepted, its bytes.
 */
export type ReadResult = Schemas["Transfer"] & { content?: Buffer };

/** The most paths one POST …/files/read takes; readMany sends more in several. */
export const READ_MANY_MAX = 1000;

/** The record of a tree transfer: one Transfer per entry, and the counts. */
export type TreeReport = Schemas["TreeReport"];

/**
 * The area a path writes into and its name below it: a relative path is
 * the workspace's; [null, path] for a path in neither area.
 */
function splitArea(path: string): [string | null, string] {
  if (!path.startsWith("/")) return ["/home/user", path];
  for (const area of ["/home/user", "/tmp"]) {
    if (path.startsWith(area + "/") && path.length > area.length + 1) return [area, path.slice(area.length + 1)];
  }
  return [null, path];
}

/**
 * A tree transfer's report, checked: an object whose transfers are an
 * array of records (objects); n, when given, is how many there must be.
 * Anything else is an internal AirlockError naming what.
 */
function treeReport(v: unknown, what: string, n?: number): TreeReport {
  const ok = (o: unknown): o is Record<string, unknown> => typeof o === "object" && o !== null && !Array.isArray(o);
  if (!ok(v) || !Array.isArray(v.transfers) || !v.transfers.every(ok) || (v.summary !== undefined && !ok(v.summary))) {
    throw errorOf("internal", `${what}: the report is not a list of transfer records: ${JSON.stringify(v)?.slice(0, 200)}`);
  }
  if (n !== undefined && v.transfers.length !== n) throw errorOf("internal", `${what}: ${v.transfers.length} records for ${n} paths`);
  return { ...v, summary: v.summary ?? {} } as TreeReport;
}

/** Files in a sandbox's workspace (/home/user). */
export class Files {
  readonly #t: Transport;
  readonly #id: string;

  constructor(t: Transport, id: string) {
    this.#t = t;
    this.#id = id;
  }

  /**
   * Write data to path (absolute, or relative to /home/user), making the
   * missing parents. The body streams; the server checks its size as it
   * arrives.
   */
  async write(path: string, data: string | Uint8Array | Readable, opts: { signal?: AbortSignal } = {}): Promise<WriteResult> {
    const body = data instanceof Readable ? { stream: data } : { bytes: typeof data === "string" ? Buffer.from(data, "utf8") : data };
    return this.#t.json<WriteResult>("PUT", `/v1/sandboxes/${enc(this.#id)}/files?path=${enc(path)}`, { body, signal: opts.signal });
  }

  /**
   * Write many files in one request per area (the workspace, /tmp): a tar
   * stream that the server judges entry by entry, under the rules of one
   * write. Returns one record per input, in input order: accepted, or
   * refused with its reason word (a refusal never throws). A file the
   * stream never reached, because a cap stopped it earlier, is refused
   * with that cap's word. A path outside the areas is written on its own,
   * so that the server refuses it as one write would.
   */
  async writeMany(files: Array<[string, string | Uint8Array]>, opts: { signal?: AbortSignal } = {}): Promise<WriteResult[]> {
    const out: WriteResult[] = new Array(files.length);
    const groups = new Map<string, number[]>();
    files.forEach(([path], i) => {
      const [area] = splitArea(path);
      if (area === null) return;
      let g = groups.get(area);
      if (!g) groups.set(area, (g = []));
      g.push(i);
    });
    const bytes = (d: string | Uint8Array) => (typeof d === "string" ? Buffer.from(d, "utf8") : d);
    for (const [area, idx] of groups) {
      const entries = idx.map((i): [string, Uint8Array] => [splitArea(files[i][0])[1], bytes(files[i][1])]);
      const answer = await this.#t.json<unknown>("PUT", `/v1/sandboxes/${enc(this.#id)}/files?path=${enc(area)}`, {
        body: { stream: tarStream(entries) },
        headers: { "content-type": "application/x-tar" },
        signal: opts.signal,
      });
      const rep = treeReport(answer, `files write to ${area}`);
      // One record per entry, in stream order: only files are sent.
      idx.forEach((i, k) => {
        out[i] = rep.transfers[k] ?? {
          direction: "upload", path: files[i][0], size: 0, decision: "refused", reason: rep.summary.stopped ?? "too_many",
          detail: "the stream stopped before this file",
        };
      });
    }
    for (let i = 0; i < files.length; i++) {
      if (out[i]) continue;
      const [path, data] = files[i];
      try {
        out[i] = await this.write(path, data, opts);
      } catch (err) {
        if (!(err instanceof AirlockError) || !err.reason) throw err;
        out[i] = { direction: "upload", path, size: 0, decision: "refused", reason: err.reason, detail: err.message };
      }
    }
    return out;
  }

  /**
   * Read the file at path, through airlock's artifact scanner: a refused
   * file is an AirlockError whose `reason` is the scanner's word
   * (type_not_allowed, symlink, is_directory, …). The file is read into
   * memory: at most its Content-Length, and at most the connection's
   * maxReadBytes (default 1 GiB).
   */
  async read(path: string, opts: { signal?: AbortSignal } = {}): Promise<Buffer> {
    const res = await this.#t.request("GET", `/v1/sandboxes/${enc(this.#id)}/files?path=${enc(path)}`, { signal: opts.signal });
    return readAll(res, this.#t.maxReadBytes, `the file ${JSON.stringify(path)}`, "maxReadBytes");
  }

  /**
   * Read many files in one request (POST …/files/read, a tar stream; one
   * request per READ_MANY_MAX paths), each through the same check as
   * read. Returns one result per input path, in input order: accepted
   * with its content, or refused with its reason word (not_found,
   * symlink, hidden_name, too_large, …); a refusal never throws. A path
   * given twice is read once, and both get its result. Each request's
   * answer is read into memory, at most the connection's maxReadBytes
   * (default 1 GiB).
   */
  async readMany(paths: string[], opts: { signal?: AbortSignal } = {}): Promise<ReadResult[]> {
    const abs = (p: string) => (p.startsWith("/") ? p : "/home/user/" + p);
    const first = new Map<string, number>();
    const unique: number[] = [];
    paths.forEach((p, i) => {
      if (!first.has(abs(p))) {
        first.set(abs(p), i);
        unique.push(i);
      }
    });
    const out: ReadResult[] = new Array(paths.length);
    for (let at = 0; at < unique.length; at += READ_MANY_MAX) {
      const idx = unique.slice(at, at + READ_MANY_MAX);
      const res = await this.#t.request("POST", `/v1/sandboxes/${enc(this.#id)}/files/read`, {
        body: { json: { paths: idx.map((i) => paths[i]) } },
        headers: { accept: "application/x-tar" },
        signal: opts.signal,
      });
      const tar = await readAll(res, this.#t.maxReadBytes, `files/read: the tar answer for ${idx.length} paths`, "maxReadBytes");
      let entries: TarEntry[];
      try {
        // Only regular files are content: a symlink or any other entry is
        // as if it were not in the stream.
        entries = untar(tar).filter((ent) => ent.type === "0");
      } catch (err) {
        throw errorOf("internal", `files/read: ${(err as Error).message}`, res.statusCode, undefined, err);
      }
      const last = entries.pop();
      if (last?.name !== ".airlock-report.json") throw errorOf("internal", "files/read: the stream does not end with its report");
      let parsed: unknown;
      try {
        parsed = JSON.parse(last.data.toString("utf8"));
      } catch (err) {
        throw errorOf("internal", `files/read: the report is not JSON: ${last.data.subarray(0, 200).toString("utf8")}`, res.statusCode, undefined, err);
      }
      const rep = treeReport(parsed, "files/read", idx.length);
      // The accepted records, in order, are the entries, in order.
      let e = 0;
      idx.forEach((i, k) => {
        const tr = rep.transfers[k];
        if (tr.decision !== "accepted") {
          out[i] = tr;
          return;
        }
        const ent = entries[e++];
        if (!ent || ent.name !== abs(paths[i]).slice(1)) {
          throw errorOf("internal", `files/read: no entry in the stream for ${JSON.stringify(paths[i])}`);
        }
        out[i] = { ...tr, content: ent.data };
      });
    }
    paths.forEach((p, i) => {
      out[i] ??= { ...out[first.get(abs(p))!], path: p };
    });
    return out;
  }
}

/** One long-lived sandbox. */
export class Sandbox {
  readonly id: string;
  readonly files: Files;
  readonly #t: Transport;

  private constructor(t: Transport, id: string) {
    this.#t = t;
    this.id = id;
    this.files = new Files(t, id);
  }

  /** Create a sandbox (POST /v1/sandboxes) and return it once it is ready. */
  static async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const t = new Transport(opts);
    const body: Schemas["SandboxRequest"] = compact({
      ...policyBody(opts),
      idle_timeout: duration(opts.idleTimeout),
      ttl: duration(opts.ttl),
      workspace_size: size(opts.workspaceSize),
      labels: opts.labels,
      download_types: opts.downloadTypes,
    });
    const headers: Record<string, string> = {};
    if (opts.idempotencyKey) headers["idempotency-key"] = opts.idempotencyKey;
    const info = await t.json<SandboxInfo>("POST", "/v1/sandboxes", { body: { json: body }, headers });
    if (!info || typeof info.id !== "string" || info.id === "") {
      throw errorOf("internal", "the server created a sandbox but did not say its id");
    }
    return new Sandbox(t, info.id);
  }

  /** A handle on an existing sandbox; it checks that the sandbox exists. */
  static async connect(id: string, conn: ConnectionOptions = {}): Promise<Sandbox> {
    const sb = new Sandbox(new Transport(conn), id);
    await sb.info();
    return sb;
  }

  /** The sandboxes the server knows. */
  static async list(conn: ConnectionOptions = {}): Promise<SandboxInfo[]> {
    const t = new Transport(conn);
    const out = await t.json<SandboxInfo[] | { sandboxes: SandboxInfo[] }>("GET", "/v1/sandboxes");
    return Array.isArray(out) ? out : (out?.sandboxes ?? []);
  }

  /** The server's record of this sandbox. */
  info(): Promise<SandboxInfo> {
    return this.#t.json<SandboxInfo>("GET", `/v1/sandboxes/${enc(this.id)}`);
  }

  /**
   * Pause the sandbox: checkpoint its processes and memory and free them
   * (oci engine under gVisor only). Its TTL still counts. Returns the
   * record, state "paused"; an exec or a file call resumes it.
   */
  pause(): Promise<SandboxInfo> {
    return this.#t.json<SandboxInfo>("POST", `/v1/sandboxes/${enc(this.id)}/pause`);
  }

  /** Resume a paused sandbox, its processes going on where they stopped. Returns the record, state "ready". */
  resume(): Promise<SandboxInfo> {
    return this.#t.json<SandboxInfo>("POST", `/v1/sandboxes/${enc(this.id)}/resume`);
  }

  /**
   * Run a command in the sandbox and return its Result. A string is run by
   * `sh -c`. With onStdout or onStderr the output streams to them as it
   * arrives (NDJSON); the Result then keeps at most the first 1 MiB and the
   * last 64 KiB of each stream, with the size and sha256 of all of it, and
   * is otherwise the same. The program's own
   * outcome (exit code, timeout, output cap) is in the Result, never thrown.
   */
  async exec(command: string | string[], opts: ExecOptions = {}): Promise<Result> {
    const body = compact({ ...execBody(command, opts), stdin_b64: b64(opts.stdin), detach: opts.detach });
    const path = `/v1/sandboxes/${enc(this.id)}/exec`;
    if (!opts.onStdout && !opts.onStderr) {
      return this.#t.json<Result>("POST", path, { body: { json: body }, signal: opts.signal });
    }
    const res = await this.#t.request("POST", path, {
      body: { json: body },
      headers: { accept: "application/x-ndjson" },
      signal: opts.signal,
    });
    return consumeExecStream(ndjson(res, this.#t.maxJsonBytes), opts);
  }

  /**
   * Start a command over the exec WebSocket and return its handle at once:
   * write() to its stdin, closeStdin(), kill(), and `await h.result` for
   * the Result. A dropped connection is resumed (reconnect) with no output
   * byte lost or repeated. An exec the server has not started within
   * startTimeout seconds (default 60) fails with TimeoutError.
   */
  spawn(command: string | string[], opts: Omit<ExecOptions, "stdin" | "detach" | "signal"> & { stdin?: boolean; reconnects?: number; startTimeout?: number } = {}): ExecHandle {
    const body = compact({ ...execBody(command, opts), stdin: opts.stdin ?? true });
    return new ExecHandle(this.#t, this.id, body, opts);
  }

  /** Destroy the sandbox. Idempotent: one already gone is not an error. */
  async close(): Promise<void> {
    try {
      await this.#t.request("DELETE", `/v1/sandboxes/${enc(this.id)}`).then((res) => readAll(res, this.#t.maxJsonBytes));
    } catch (err) {
      if (err instanceof AirlockError && err.kind === "not_found") return;
      throw err;
    }
  }

  /** `await using sb = await Sandbox.create()` closes it at the block's end. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

interface StreamEvent {
  type?: unknown;
  data_b64?: unknown;
  result?: unknown;
  error?: unknown;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Feeds an exec's NDJSON events to the callbacks and returns its final Result. */
export async function consumeExecStream(events: AsyncIterable<unknown>, opts: Pick<ExecOptions, "onStdout" | "onStderr">): Promise<Result> {
  for await (const raw of events) {
    const ev = raw as StreamEvent;
    switch (ev?.type) {
      case "stdout":
      case "stderr": {
        const chunk = decodeB64(ev.data_b64, `the exec's ${ev.type} event`);
        (ev.type === "stdout" ? opts.onStdout : opts.onStderr)?.(chunk);
        break;
      }
      case "exit":
        if (!isObject(ev.result)) throw errorOf("internal", "the server's exit event carries no result");
        return ev.result as unknown as Result;
      case "error": {
        const e = isObject(ev.error) ? ev.error : {};
        throw errorOf(isErrorKind(e.kind) ? e.kind : "internal", typeof e.message === "string" ? e.message : "the exec failed", 0, typeof e.reason === "string" ? e.reason : undefined);
      }
      default:
        // Unknown event types are for newer clients.
        break;
    }
  }
  throw errorOf("unavailable", "the server's exec stream ended before its exit event; the connection dropped");
}

/**
 * A one-shot run (POST /v1/runs): a fresh sandbox for one command, gone
 * when it ends. Returns the Result, exactly that of `airlock run --json`.
 */
export async function run(command: string | string[], opts: RunOptions = {}): Promise<Result> {
  const t = new Transport(opts);
  const body: Schemas["RunRequest"] = compact({
    ...policyBody(opts),
    argv: argvOf(command),
    stdin_b64: b64(opts.stdin),
    workdir: opts.workdir,
  });
  const headers: Record<string, string> = {};
  if (opts.idempotencyKey) headers["idempotency-key"] = opts.idempotencyKey;
  return t.json<Result>("POST", "/v1/runs", { body: { json: body }, headers, signal: opts.signal });
}
