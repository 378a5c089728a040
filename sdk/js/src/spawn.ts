/**
 * Interactive execs over the exec WebSocket (/v1/sandboxes/{id}/exec/ws):
 * stdin fed while the program runs, kill, and a reconnect after a dropped
 * connection that resumes the output with no byte lost or repeated. Node
 * 20 has no stable WebSocket of its own, so this uses `ws`.
 */
import WebSocket from "ws";
import { AirlockError, errorFromResponse, errorOf, isErrorKind } from "./errors.js";
import { type Transport, MAX_ERROR_BODY_BYTES, bytes, decodeB64, readHead } from "./transport.js";
import type { Result, Schemas } from "./sandbox.js";

/** The callbacks and retry budget of Sandbox.spawn. */
export interface SpawnOptions {
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** How many times to reconnect after a dropped connection (default 5). */
  reconnects?: number;
  /**
   * Seconds each connection may take to have the exec started (the
   * server's started event) before the exec fails with TimeoutError and
   * the connection is dropped (default 60).
   */
  startTimeout?: number;
}

/** The default of SpawnOptions.startTimeout, in seconds. */
export const DEFAULT_START_TIMEOUT = 60;

interface ServerEvent {
  type?: unknown;
  exec_id?: unknown;
  max_message_bytes?: unknown;
  data_b64?: unknown;
  offset?: unknown;
  result?: unknown;
  error?: unknown;
}

/** A client message to the server; input carries raw bytes until it is sent. */
type ClientMessage = { type: "input"; data: Buffer } | { type: "close_stdin" | "kill" };

/** The bytes of an input message's JSON around its base64: {"type":"input","data_b64":""}. */
const INPUT_OVERHEAD = JSON.stringify({ type: "input", data_b64: "" }).length;

/** Whether v is a JSON object (not null, not an array). */
function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** A running exec. `result` settles with its Result once it ends. */
export class ExecHandle {
  /** The server's exec id, once started. */
  execId?: string;
  /** The Result, once the program ended. */
  readonly result: Promise<Result>;
  readonly #t: Transport;
  readonly #path: string;
  readonly #opts: SpawnOptions;
  readonly #got = [0, 0];
  #ws?: WebSocket;
  #done = false;
  #reconnectsLeft: number;
  readonly #startMs: number;
  /** Fails the exec unless the connection being opened starts it in time. */
  #startTimer?: NodeJS.Timeout;
  #resolve!: (r: Result) => void;
  #reject!: (e: unknown) => void;
  #queue: ClientMessage[] = [];
  /** The most bytes of one message the server takes, from started (none before it). */
  #maxMessage?: number;
  #started: Promise<string>;
  #startedResolve!: (id: string) => void;

  /** @internal Use Sandbox.spawn. */
  constructor(t: Transport, sandboxId: string, body: Schemas["ExecRequest"], opts: SpawnOptions) {
    this.#t = t;
    this.#path = `/v1/sandboxes/${encodeURIComponent(sandboxId)}/exec/ws`;
    this.#opts = opts;
    this.#reconnectsLeft = opts.reconnects ?? 5;
    const start = opts.startTimeout ?? DEFAULT_START_TIMEOUT;
    if (typeof start !== "number" || !Number.isFinite(start) || start <= 0) {
      throw errorOf("invalid_input", `startTimeout ${String(start)}: give a positive number of seconds`);
    }
    this.#startMs = start * 1000;
    this.result = new Promise((res, rej) => {
      this.#resolve = res;
      this.#reject = rej;
    });
    this.result.catch(() => {});
    this.#started = new Promise((res) => {
      this.#startedResolve = res;
    });
    this.#connect({ type: "execute", ...body });
  }

  /** Wait until the exec has started (the server named it). */
  started(): Promise<string> {
    return Promise.race([this.#started, this.result.then(() => this.execId ?? "")]);
  }

  /**
   * Send bytes to the program's stdin. Data of any size is sent as as many
   * input messages as the server's max_message_bytes (from started) asks.
   */
  write(data: string | Uint8Array): void {
    this.#send({ type: "input", data: Buffer.from(typeof data === "string" ? Buffer.from(data, "utf8") : data) });
  }

  /** End the program's stdin. */
  closeStdin(): void {
    this.#send({ type: "close_stdin" });
  }

  /** Kill the program; its Result then says `killed`. */
  kill(): void {
    this.#send({ type: "kill" });
  }

  #send(msg: ClientMessage): void {
    if (this.#done) throw errorOf("invalid_input", "the exec has ended");
    if (this.#ws?.readyState === WebSocket.OPEN && this.execId) this.#put(this.#ws, msg);
    else this.#queue.push(msg);
  }

  /** Send one message, an input split so that each message's JSON fits max_message_bytes. */
  #put(ws: WebSocket, msg: ClientMessage): void {
    if (msg.type !== "input") {
      ws.send(JSON.stringify(msg));
      return;
    }
    // base64 writes 3 bytes as 4 characters.
    const step = this.#maxMessage === undefined ? msg.data.length : Math.floor((this.#maxMessage - INPUT_OVERHEAD) / 4) * 3;
    let at = 0;
    do {
      const piece = msg.data.subarray(at, at + Math.max(step, 1));
      ws.send(JSON.stringify({ type: "input", data_b64: piece.toString("base64") }));
      at += piece.length;
    } while (at < msg.data.length);
  }

  #connect(first: object): void {
    const headers: Record<string, string> = {};
    const auth = this.#t.authorization;
    if (auth) headers["authorization"] = auth;
    const url = this.#t.base
      ? new URL(this.#path, this.#t.base).toString().replace(/^http/, "ws")
      : `ws+unix://${this.#t.socketPath}:${this.#path}`;
    const max = this.#t.maxJsonBytes;
    const ws = new WebSocket(url, { headers, perMessageDeflate: false, maxPayload: max });
    this.#ws = ws;
    // A server that takes the connection but never answers, or never
    // starts the exec, would otherwise hold the caller forever.
    clearTimeout(this.#startTimer);
    this.#startTimer = setTimeout(() => {
      this.#fail(
        errorOf(
          "timeout",
          `the exec did not start within ${this.#startMs / 1000}s (startTimeout) on airlock's exec WebSocket at ${this.#t.where}: ` +
            "check that airlock serve is running and answering there, and that the sandbox is not stuck (airlock sandbox ls); raise startTimeout if its start is that slow",
        ),
      );
    }, this.#startMs);
    let opened = false;
    ws.on("open", () => {
      opened = true;
      ws.send(JSON.stringify(first));
    });
    ws.on("unexpected-response", (_req, res) => {
      const fail = (body: Buffer) => {
        this.#fail(errorFromResponse(res.statusCode ?? 0, body.toString("utf8")));
        ws.terminate();
      };
      readHead(res, MAX_ERROR_BODY_BYTES).then(fail, () => fail(Buffer.alloc(0)));
    });
    ws.on("message", (data) => {
      // Whatever the server sends, a throw here would be uncaught, in ws's handler.
      try {
        this.#onMessage(data.toString());
      } catch (err) {
        this.#fail(err instanceof AirlockError ? err : errorOf("internal", `the exec WebSocket's message failed: ${(err as Error)?.message ?? err}`, 0, undefined, err));
      }
    });
    ws.on("error", (err: Error & { code?: string }) => {
      // A message past maxPayload would be met again on a reconnect.
      if (err.code === "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH") {
        this.#fail(
          errorOf(
            "internal",
            `a message on the exec's WebSocket passed ${bytes(max)}, the most this client takes (maxJsonBytes): ` +
              "an exec's output limit asks for more; raise maxJsonBytes if it is expected",
          ),
        );
      }
      // Otherwise "close" follows and decides.
    });
    ws.on("close", () => {
      if (this.#done) return;
      if (!opened && !this.execId) {
        this.#fail(errorOf("unavailable", `reaching airlock's exec WebSocket at ${this.#t.where} failed`));
        return;
      }
      if (!this.execId || this.#reconnectsLeft <= 0) {
        this.#fail(errorOf("unavailable", "the exec's WebSocket closed before its exit event, and reconnecting did not help"));
        return;
      }
      this.#reconnectsLeft--;
      const execId = this.execId;
      this.execId = undefined;
      setTimeout(() => this.#connect({ type: "reconnect", exec_id: execId, stdout_offset: this.#got[0], stderr_offset: this.#got[1] }), 100);
    });
  }

  #onMessage(text: string): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      this.#fail(errorOf("internal", `the exec WebSocket sent a message that is not JSON: ${text.slice(0, 200)}`));
      return;
    }
    if (!isObject(parsed)) {
      this.#fail(errorOf("internal", `the exec WebSocket sent a message that is not a JSON object: ${text.slice(0, 200)}`));
      return;
    }
    const ev = parsed as ServerEvent;
    switch (ev.type) {
      case "started": {
        const max = ev.max_message_bytes;
        if (typeof ev.exec_id !== "string" || ev.exec_id === "") {
          this.#fail(errorOf("internal", "the exec WebSocket's started event names no exec"));
          return;
        }
        if (max !== undefined && (!Number.isSafeInteger(max) || (max as number) < INPUT_OVERHEAD + 4)) {
          this.#fail(errorOf("internal", `the exec WebSocket's started event has max_message_bytes ${JSON.stringify(max)}, too small for any input message`));
          return;
        }
        this.#maxMessage = max as number | undefined;
        this.execId = ev.exec_id;
        clearTimeout(this.#startTimer);
        this.#startedResolve(ev.exec_id);
        const ws = this.#ws;
        if (ws) for (const m of this.#queue.splice(0)) this.#put(ws, m);
        break;
      }
      case "stdout":
      case "stderr": {
        const i = ev.type === "stdout" ? 0 : 1;
        let chunk = decodeB64(ev.data_b64, `the exec's ${ev.type} event`);
        const offset = typeof ev.offset === "number" ? ev.offset : this.#got[i];
        // Skip what was already delivered before a reconnect.
        if (offset < this.#got[i]) chunk = chunk.subarray(this.#got[i] - offset);
        else if (offset > this.#got[i]) {
          this.#fail(errorOf("internal", `the exec's ${ev.type} skipped from byte ${this.#got[i]} to ${offset}`));
          return;
        }
        if (chunk.length === 0) break;
        this.#got[i] += chunk.length;
        const cb = i === 0 ? this.#opts.onStdout : this.#opts.onStderr;
        try {
          cb?.(chunk);
        } catch (err) {
          this.#fail(err); // the caller's own error, as exec() throws it
        }
        break;
      }
      case "exit":
        if (!isObject(ev.result)) {
          this.#fail(errorOf("internal", "the server's exit event carries no result"));
          return;
        }
        this.#done = true;
        clearTimeout(this.#startTimer);
        this.#resolve(ev.result as unknown as Result);
        this.#ws?.close();
        break;
      case "error": {
        const e = isObject(ev.error) ? ev.error : {};
        this.#fail(errorOf(isErrorKind(e.kind) ? e.kind : "internal", typeof e.message === "string" ? e.message : "the exec failed", 0, typeof e.reason === "string" ? e.reason : undefined));
        break;
      }
      default:
        break;
    }
  }

  #fail(err: unknown): void {
    if (this.#done) return;
    this.#done = true;
    clearTimeout(this.#startTimer);
    this.#reject(err);
    this.#ws?.terminate();
  }
}
