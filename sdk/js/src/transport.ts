/**
 * The HTTP transport to `airlock serve`: a unix socket (the default) or a
 * TCP URL with a bearer token. Node's own http module is enough, so the
 * request-response client needs nothing else.
 */
import http from "node:http";
import https from "node:https";
import { Readable } from "node:stream";
import { AirlockError, errorFromResponse, errorOf } from "./errors.js";

/** Where the server is and how to authenticate to it. */
export interface ConnectionOptions {
  /** The server's unix socket. Default: $AIRLOCK_SOCKET, else /run/airlock/airlock.sock. */
  socketPath?: string;
  /** The server's URL, e.g. http://127.0.0.1:7070. Default: $AIRLOCK_URL. Overrides socketPath. */
  url?: string;
  /** The bearer token; required over TCP. Default: $AIRLOCK_TOKEN. */
  token?: string;
  /**
   * The most bytes of one JSON value the client takes from the server: a
   * JSON response body, one line of an exec's NDJSON stream, or one
   * message of an exec's WebSocket. Default
   * DEFAULT_MAX_JSON_BYTES (64 MiB). An exec's Result holds the head of
   * its stdout and stderr, up to the output limit each, and JSON may
   * write a byte of output as up to 6 (`\u0000`): raise this for execs
   * whose output limit is past a few MiB.
   */
  maxJsonBytes?: number;
  /**
   * The most bytes one file read takes into memory: the body of
   * Files.read (which the server sizes with Content-Length), and the
   * whole tar answer of one Files.readMany request. Default
   * DEFAULT_MAX_READ_BYTES (1 GiB, the default workspace size, which is
   * what the server lets one read carry); raise it to read more at once
   * from a larger workspace.
   */
  maxReadBytes?: number;
}

/** The default of ConnectionOptions.maxJsonBytes: 64 MiB. */
export const DEFAULT_MAX_JSON_BYTES = 64 << 20;

/** The default of ConnectionOptions.maxReadBytes: 1 GiB. */
export const DEFAULT_MAX_READ_BYTES = 1 << 30;

/** The most bytes of an error response's body that are read: its error shape is small. */
export const MAX_ERROR_BODY_BYTES = 1 << 20;

/** The default socket of `airlock serve`. */
export const DEFAULT_SOCKET = "/run/airlock/airlock.sock";

/** A request body: JSON, raw bytes, or a byte stream. */
export type Body = { json: unknown } | { bytes: Uint8Array } | { stream: Readable } | undefined;

export interface RequestOptions {
  body?: Body;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/** One connection to the server; cheap to copy, holds no sockets. */
export class Transport {
  readonly socketPath?: string;
  readonly base?: URL;
  /** See ConnectionOptions.maxJsonBytes. */
  readonly maxJsonBytes: number;
  /** See ConnectionOptions.maxReadBytes. */
  readonly maxReadBytes: number;
  readonly #token?: string;

  constructor(opts: ConnectionOptions = {}) {
    this.maxJsonBytes = byteCap("maxJsonBytes", opts.maxJsonBytes, DEFAULT_MAX_JSON_BYTES);
    this.maxReadBytes = byteCap("maxReadBytes", opts.maxReadBytes, DEFAULT_MAX_READ_BYTES);
    const url = opts.url ?? (opts.socketPath ? undefined : process.env.AIRLOCK_URL || undefined);
    this.#token = opts.token ?? (process.env.AIRLOCK_TOKEN || undefined);
    if (url) {
      let u: URL;
      try {
        u = new URL(url);
      } catch {
        throw errorOf("invalid_input", `url ${JSON.stringify(url)} is not a URL; give one such as http://127.0.0.1:7070`);
      }
      if (u.protocol !== "http:" && u.protocol !== "https:") {
        throw errorOf("invalid_input", `url ${JSON.stringify(url)}: use http:// or https://`);
      }
      this.base = u;
    } else {
      this.socketPath = opts.socketPath ?? (process.env.AIRLOCK_SOCKET || DEFAULT_SOCKET);
    }
  }

  /** The Authorization header's value: the token, over TCP only (the socket's permissions are its access control). */
  get authorization(): string | undefined {
    return this.#token && this.base ? `Bearer ${this.#token}` : undefined;
  }

  /** Where requests go, for messages. */
  get where(): string {
    return this.base ? this.base.origin : `unix:${this.socketPath}`;
  }

  /**
   * Send a request and return the response once its headers arrive. A
   * non-2xx status becomes a typed AirlockError, its body read.
   */
  async request(method: string, path: string, opts: RequestOptions = {}): Promise<http.IncomingMessage> {
    const headers: Record<string, string> = { ...opts.headers };
    const auth = this.authorization;
    if (auth) headers["authorization"] = auth;
    let payload: Uint8Array | undefined;
    let stream: Readable | undefined;
    const body = opts.body;
    if (body && "json" in body) {
      payload = Buffer.from(JSON.stringify(body.json));
      headers["content-type"] = "application/json";
    } else if (body && "bytes" in body) {
      payload = body.bytes;
      headers["content-type"] ??= "application/octet-stream";
    } else if (body && "stream" in body) {
      stream = body.stream;
      headers["content-type"] ??= "application/octet-stream";
    }
    if (payload) headers["content-length"] = String(payload.byteLength);

    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const common = { method, headers, signal: opts.signal };
      let req: http.ClientRequest;
      if (this.base) {
        const u = new URL(path, this.base);
        const mod = u.protocol === "https:" ? https : http;
        req = mod.request(u, common, resolve);
      } else {
        req = http.request({ ...common, socketPath: this.socketPath, path }, resolve);
      }
      req.on("error", (err: NodeJS.ErrnoException) => reject(this.#connError(err)));
      if (stream) {
        stream.on("error", (err) => req.destroy(err));
        stream.pipe(req);
      } else {
        req.end(payload);
      }
    });
    if (opts.signal) signals.set(res, opts.signal);
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      // The status alone still says what failed when its body cannot be read.
      const body = await readHead(res, MAX_ERROR_BODY_BYTES).catch(() => Buffer.alloc(0));
      throw errorFromResponse(status, body.toString("utf8"));
    }
    return res;
  }

  /** Send a request and parse its JSON response. */
  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, { ...opts, headers: { accept: "application/json", ...opts.headers } });
    const text = (await readAll(res, this.maxJsonBytes, `${method} ${path}: the JSON answer`, "maxJsonBytes")).toString("utf8");
    if (text.trim() === "") return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw errorOf("internal", `${method} ${path}: the server's answer is not JSON: ${text.slice(0, 200)}`, res.statusCode, undefined, err);
    }
  }

  #connError(err: NodeJS.ErrnoException): AirlockError {
    if (err instanceof AirlockError) return err;
    if (err.name === "AbortError") return errorOf("timeout", `request to ${this.where} aborted`, 0, undefined, err);
    const hint =
      err.code === "ENOENT" || err.code === "ECONNREFUSED"
        ? "; is `airlock serve` running there? Start it, or give socketPath/url (or $AIRLOCK_SOCKET/$AIRLOCK_URL)"
        : err.code === "EACCES"
          ? "; the socket is mode 0660: run as root or as a member of the airlock group"
          : "";
    return errorOf("unavailable", `reaching airlock at ${this.where}: ${err.message}${hint}`, 0, undefined, err);
  }
}

function byteCap(name: string, v: number | undefined, def: number): number {
  if (v === undefined) return def;
  if (!Number.isSafeInteger(v) || v <= 0) throw errorOf("invalid_input", `${name} ${v}: give a positive whole number of bytes`);
  return v;
}

/** A byte count for messages: "64 MiB", "1 GiB", "1000 bytes". */
export function bytes(n: number): string {
  for (const [unit, k] of [["GiB", 30], ["MiB", 20], ["KiB", 10]] as const) {
    if (n >= 2 ** k && n % 2 ** k === 0) return `${n / 2 ** k} ${unit}`;
  }
  return `${n} bytes`;
}

/**
 * The bytes of an event's data_b64, which must be standard base64 (as
 * the server writes it): anything else is an internal AirlockError.
 */
export function decodeB64(v: unknown, what: string): Buffer {
  if (typeof v !== "string" || v.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(v)) {
    const shown = typeof v === "string" ? JSON.stringify(v.slice(0, 40)) : JSON.stringify(v) ?? String(v);
    throw errorOf("internal", `${what} has a data_b64 that is not base64: ${shown}`);
  }
  return Buffer.from(v, "base64");
}

/** The caller's AbortSignal of each response, so that a body read it aborts is told from a dropped connection. */
const signals = new WeakMap<Readable, AbortSignal>();

/**
 * The typed error of a failed body read, what naming the body: the
 * caller's AbortSignal is a timeout, as it is before the headers
 * (Transport's #connError); anything else is a dropped connection.
 */
function bodyError(res: Readable, err: unknown, what: string): AirlockError {
  if (err instanceof AirlockError) return err;
  res.destroy();
  const msg = err instanceof Error ? err.message : String(err);
  if (signals.get(res)?.aborted || (err instanceof Error && err.name === "AbortError")) {
    return errorOf("timeout", `reading ${what}: aborted`, 0, undefined, err);
  }
  return errorOf("unavailable", `reading ${what}: the connection dropped (${msg})`, 0, undefined, err);
}

/** The Content-Length of a response, when it has a valid one. */
function contentLength(res: Readable): number | undefined {
  const v = (res as Partial<http.IncomingMessage>).headers?.["content-length"];
  if (typeof v !== "string" || !/^[0-9]+$/.test(v)) return undefined;
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : undefined;
}

/**
 * All of a response's body, at most max bytes: an answer whose
 * Content-Length, or whose body, passes max is an internal AirlockError
 * naming what and the option (option) that raises max, and the response
 * is dropped. Node's parser ends a body at its Content-Length.
 */
export async function readAll(res: Readable, max = DEFAULT_MAX_JSON_BYTES, what = "the answer", option = "maxJsonBytes"): Promise<Buffer> {
  const tooBig = () => {
    res.destroy();
    return errorOf("internal", `${what} passes ${bytes(max)}, the most this client takes (${option}); raise ${option} if it is expected`);
  };
  const declared = contentLength(res);
  if (declared !== undefined && declared > max) throw tooBig();
  const chunks: Buffer[] = [];
  let n = 0;
  try {
    for await (const c of res) {
      n += (c as Buffer).length;
      if (n > max) throw tooBig();
      chunks.push(c as Buffer);
    }
  } catch (err) {
    throw bodyError(res, err, what);
  }
  return Buffer.concat(chunks, n);
}

/** The first max bytes of a response's body; the rest is not read, and the response is dropped. */
export async function readHead(res: Readable, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let n = 0;
  try {
    for await (const c of res) {
      const b = c as Buffer;
      chunks.push(b.subarray(0, max - n));
      n += Math.min(b.length, max - n);
      if (n >= max) break; // leaving the loop destroys the response
    }
  } catch (err) {
    throw bodyError(res, err, "the error answer");
  }
  return Buffer.concat(chunks, n);
}

/**
 * The lines of an NDJSON response, parsed, as they arrive. Each chunk is
 * scanned once for its newlines; a line longer than maxLine bytes is an
 * internal AirlockError (a stream that never ends its line would
 * otherwise grow without bound), and the response is dropped.
 */
export async function* ndjson(res: Readable, maxLine = DEFAULT_MAX_JSON_BYTES): AsyncGenerator<unknown> {
  // The current line's pieces; a newline byte is never inside a UTF-8
  // sequence, so lines are cut as bytes and decoded whole.
  let parts: Buffer[] = [];
  let held = 0;
  const hold = (piece: Buffer) => {
    if (held + piece.length > maxLine) {
      res.destroy();
      throw errorOf(
        "internal",
        `the server's NDJSON stream has a line past ${bytes(maxLine)} with no end, the most this client takes (maxJsonBytes): ` +
          "the stream is malformed, or an exec's output limit asks for more; raise maxJsonBytes if it is expected",
      );
    }
    if (piece.length > 0) parts.push(piece);
    held += piece.length;
  };
  const take = () => {
    const line = Buffer.concat(parts, held).toString("utf8").trim();
    parts = [];
    held = 0;
    return line;
  };
  try {
    for await (const chunk of res) {
      const c = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : (chunk as Buffer);
      let start = 0;
      for (let nl = c.indexOf(0x0a); nl >= 0; nl = c.indexOf(0x0a, start)) {
        hold(c.subarray(start, nl));
        start = nl + 1;
        const line = take();
        if (line) yield parseLine(line);
      }
      hold(c.subarray(start));
    }
  } catch (err) {
    throw bodyError(res, err, "the server's NDJSON stream");
  }
  const line = take();
  if (line) yield parseLine(line);
}

function parseLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch (err) {
    throw errorOf("internal", `the server's stream has a line that is not JSON: ${line.slice(0, 200)}`, 0, undefined, err);
  }
}
