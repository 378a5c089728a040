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
}

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
  readonly #token?: string;

  constructor(opts: ConnectionOptions = {}) {
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
    const status = res.statusCode ?? 0;
    if (status < 200 || status > 299) {
      throw errorFromResponse(status, (await readAll(res)).toString("utf8"));
    }
    return res;
  }

  /** Send a request and parse its JSON response. */
  async json<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const res = await this.request(method, path, { ...opts, headers: { accept: "application/json", ...opts.headers } });
    const text = (await readAll(res)).toString("utf8");
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

/** All of a response's body. */
export async function readAll(res: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** The lines of an NDJSON response, parsed, as they arrive. */
export async function* ndjson(res: Readable): AsyncGenerator<unknown> {
  let buf = "";
  res.setEncoding("utf8");
  for await (const chunk of res) {
    buf += chunk as string;
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) yield parseLine(line);
    }
  }
  if (buf.trim()) yield parseLine(buf.trim());
}

function parseLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch (err) {
    throw errorOf("internal", `the server's stream has a line that is not JSON: ${line.slice(0, 200)}`, 0, undefined, err);
  }
}
